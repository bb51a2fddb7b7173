#!/usr/bin/env bash
# Builds Kyverno's admission controller (cmd/kyverno) and background controller
# (cmd/background-controller) from the Go module at a pinned version, through the Go module proxy,
# and caches them outside the repository, with the CRDs of that version beside them (crds/).
# Kyverno's go.mod carries a `replace` (k8s.io/pod-security-admission => a Kyverno fork), which
# `go install` refuses; so it is built from a tiny go.mod of our own that requires the module and
# carries the same replacement (as build-control-plane.sh does for Kubernetes).
#
# The toolchain is the installed Go (GOTOOLCHAIN=local unless set): this machine cannot download
# another, so a module wanting a newer Go fails here, with its message.
#
# Prints the directory holding the binaries and crds/ on its last line. A warm cache returns at once.
set -euo pipefail

KYVERNO_VERSION="${MIMEO_KYVERNO_VERSION:-v1.19.1}"
CACHE_ROOT="${MIMEO_CACHE_DIR:-$HOME/.cache/mimeo}"
BIN_DIR="$CACHE_ROOT/kyverno-$KYVERNO_VERSION"
BUILD_DIR="$CACHE_ROOT/kyverno-build/$KYVERNO_VERSION"
MODULE=github.com/kyverno/kyverno

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

log() { echo "build-kyverno: $*" >&2; }

have_all() {
  [[ -x "$BIN_DIR/kyverno" && -x "$BIN_DIR/background-controller" && -d "$BIN_DIR/crds" ]]
}

if have_all; then
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$BIN_DIR" "$BUILD_DIR"

# One build at a time: test binaries and CI may ask at once.
exec 9>"$BUILD_DIR/.lock"
flock 9
if have_all; then
  echo "$BIN_DIR"
  exit 0
fi

# The module's own go.mod and source directory, downloaded through the proxy if not cached.
module_field() {
  (cd "$BUILD_DIR" && go mod download -json "$MODULE@$KYVERNO_VERSION" |
    sed -n "s/.*\"$1\": \"\(.*\)\",*/\1/p")
}

write_module() {
  local upstream="$1"
  {
    echo "module mimeo.dev/bench/kyverno"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$upstream")"
    echo
    echo "require $MODULE $KYVERNO_VERSION"
    echo
    # Every `replace` of the upstream go.mod that points at a published module (not ./path).
    grep -E '^replace\s+\S+\s+=>\s+[^ .]\S*\s+v\S+' "$upstream" || true
  } >"$BUILD_DIR/go.mod"
  cat >"$BUILD_DIR/tools.go" <<GO
//go:build tools

package tools

import (
	_ "$MODULE/cmd/background-controller"
	_ "$MODULE/cmd/kyverno"
)
GO
}

start=$SECONDS
upstream="$(module_field GoMod)"
source_dir="$(module_field Dir)"
write_module "$upstream"
log "resolving $MODULE $KYVERNO_VERSION"
(cd "$BUILD_DIR" && go mod tidy -e >/dev/null 2>"$BUILD_DIR/tidy.log" ||
  { cat "$BUILD_DIR/tidy.log" >&2; exit 1; })
log "building kyverno and background-controller with $(go env GOVERSION) (a cold build takes many minutes)"
# Into a scratch directory first, so an interrupted build never leaves a half-written binary at
# the cached path that the next run would take as done.
scratch="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
(cd "$BUILD_DIR" && go build -trimpath \
    -ldflags "-s -w -X $MODULE/pkg/version.BuildVersion=$KYVERNO_VERSION" \
    -o "$scratch/" "$MODULE/cmd/kyverno" "$MODULE/cmd/background-controller")
mkdir -p "$scratch/crds"
cp "$source_dir"/config/crds/kyverno/*.yaml "$source_dir"/config/crds/policyreport/*.yaml \
  "$source_dir"/config/crds/reports/*.yaml "$source_dir"/config/crds/policies.kyverno.io/*.yaml \
  "$scratch/crds/"
chmod -R u+w "$scratch/crds"
rm -rf "$BIN_DIR/crds"
mv "$scratch/kyverno" "$scratch/background-controller" "$scratch/crds" "$BIN_DIR/"
have_all || { log "binaries missing after build"; exit 1; }
log "built in $((SECONDS - start)) s into $BIN_DIR"
echo "$BIN_DIR"
