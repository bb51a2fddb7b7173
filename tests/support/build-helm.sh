#!/usr/bin/env bash
# Builds the Helm CLI (`helm`, v3), which tests use to lint, render and install charts/mimeo, from
# its Go module at a pinned version through the Go module proxy, and caches it outside the
# repository. Like oras (build-oras.sh) and unlike Kubernetes and etcd (build-control-plane.sh),
# helm's go.mod has no `replace` directives, so a plain `go install module@version` builds it.
#
# The version and the Kubernetes version helm assumes without a cluster (`helm template`'s
# .Capabilities.KubeVersion, `helm lint`'s deprecation checks) are set with -ldflags as helm's own
# Makefile sets them; without that the binary calls itself "v3.N" and assumes Kubernetes 1.20.
#
# The toolchain is the installed Go (GOTOOLCHAIN=local unless set): this machine cannot download
# another, so a module wanting a newer Go must fail here, with its message, not hang on a fetch.
#
# Prints the binary's path on its last line. A warm cache returns at once.
set -euo pipefail

HELM_VERSION="${MIMEO_HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${MIMEO_CACHE_DIR:-$HOME/.cache/mimeo}"
BIN_DIR="$CACHE_ROOT/helm/$HELM_VERSION"
BIN="$BIN_DIR/helm"

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

log() { echo "build-helm: $*" >&2; }

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$BIN_DIR"

# One build at a time: test binaries and CI may ask at once.
exec 9>"$CACHE_ROOT/helm/.lock"
flock 9
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

start=$SECONDS
log "building helm.sh/helm/v3 $HELM_VERSION with $(go env GOVERSION)"
# The Kubernetes version helm's Makefile derives from its client-go (v0.N.x means Kubernetes 1.N).
gomod="$(cd "$BIN_DIR" && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
  sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
client_go="$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)"
[[ -n "$client_go" ]] || { log "no k8s.io/client-go requirement in $gomod"; exit 1; }
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go"
done
# Into a scratch directory first, so an interrupted build never leaves a half-written binary at
# the cached path that the next run would take as done.
scratch="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
GOBIN="$scratch" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv "$scratch/helm" "$BIN"
log "built helm $("$BIN" version --short) in $((SECONDS - start)) s into $BIN_DIR"
echo "$BIN"
