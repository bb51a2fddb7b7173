#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from their Go modules at pinned versions, through the Go
# module proxy, and caches them outside the repository. Both upstream modules carry `replace`
# directives (Kubernetes for its staging modules, etcd for its sibling modules), which `go install`
# refuses; so each is built from a tiny go.mod of our own that requires the module and replaces
# those siblings with their published versions.
#
# Prints the directory holding the binaries on its last line. A warm cache returns at once.
set -euo pipefail

KUBERNETES_VERSION="${MIMEO_KUBERNETES_VERSION:-v1.36.3}"
ETCD_VERSION="${MIMEO_ETCD_VERSION:-v3.6.16}"
CACHE_ROOT="${MIMEO_CACHE_DIR:-$HOME/.cache/mimeo}"
BIN_DIR="$CACHE_ROOT/envtest/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION"
BUILD_ROOT="$CACHE_ROOT/envtest/build"

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0

log() { echo "build-control-plane: $*" >&2; }

have_all() {
  [[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/kubectl" && -x "$BIN_DIR/etcd" ]]
}

if have_all; then
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$BIN_DIR" "$BUILD_ROOT"

# One build at a time: test binaries and CI may ask at once.
exec 9>"$BUILD_ROOT/.lock"
flock 9
if have_all; then
  echo "$BIN_DIR"
  exit 0
fi

# Writes `replace` lines that point every `=> ./path` replacement of an upstream go.mod at the
# published version of that module.
published_replacements() {
  local gomod="$1" version="$2"
  grep -E '^\s*[^ /]+\S*\s+=>\s+\.\.?/' "$gomod" |
    grep -v FORBIDDEN_DEPENDENCY |
    awk -v v="$version" '{print "replace " $1 " => " $1 " " v}'
}

build_kubernetes() {
  local dir="$BUILD_ROOT/kubernetes-$KUBERNETES_VERSION"
  local staging="v0${KUBERNETES_VERSION#v1}"   # v1.36.3 -> v0.36.3
  mkdir -p "$dir"
  local upstream
  upstream="$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" |
    sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  {
    echo "module mimeo.dev/envtest/kubernetes"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$upstream")"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    published_replacements "$upstream" "$staging"
  } >"$dir/go.mod"
  cat >"$dir/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  log "resolving k8s.io/kubernetes $KUBERNETES_VERSION"
  (cd "$dir" && go mod tidy -e >/dev/null 2>"$dir/tidy.log" || { cat "$dir/tidy.log" >&2; exit 1; })
  log "building kube-apiserver and kubectl (a cold build takes several minutes)"
  (cd "$dir" && go build -trimpath -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION \
      -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION" \
      -o "$BIN_DIR/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
}

build_etcd() {
  local dir="$BUILD_ROOT/etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  local upstream
  upstream="$(cd "$dir" && go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" |
    sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  {
    echo "module mimeo.dev/envtest/etcd"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$upstream")"
    echo
    echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    echo
    published_replacements "$upstream" "$ETCD_VERSION"
  } >"$dir/go.mod"
  cat >"$dir/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  log "resolving go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  (cd "$dir" && go mod tidy -e >/dev/null 2>"$dir/tidy.log" || { cat "$dir/tidy.log" >&2; exit 1; })
  log "building etcd"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/etcd" go.etcd.io/etcd/server/v3)
}

start=$SECONDS
[[ -x "$BIN_DIR/etcd" ]] || build_etcd
[[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/kubectl" ]] || build_kubernetes
have_all || { log "binaries missing after build"; exit 1; }
log "built in $((SECONDS - start)) s into $BIN_DIR"
echo "$BIN_DIR"
