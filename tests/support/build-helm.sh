#!/usr/bin/env bash
# Builds the Helm CLI (`helm`, v3), which tests use to lint, render and install charts/mimeo, from
# its Go module at a pinned version, and caches it outside the repository (go-install-cached.sh).
#
# The version and the Kubernetes version helm assumes without a cluster (`helm template`'s
# .Capabilities.KubeVersion, `helm lint`'s deprecation checks) are set with -ldflags as helm's own
# Makefile sets them; without that the binary calls itself "v3.N" and assumes Kubernetes 1.20.
#
# Prints the binary's path on its last line. A warm cache returns at once.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-install-cached.sh"

HELM_VERSION="${MIMEO_HELM_VERSION:-v3.22.0}"

# The Kubernetes version helm's Makefile derives from its client-go (v0.N.x means Kubernetes 1.N).
helm_ldflags() {
  local gomod client_go pkg
  gomod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
    sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  client_go="$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)"
  [[ -n "$client_go" ]] || { echo "build-helm: no k8s.io/client-go requirement in $gomod" >&2; return 1; }
  echo -n "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    echo -n " -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go"
  done
}

go_install_cached helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm helm_ldflags
