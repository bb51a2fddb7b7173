#!/usr/bin/env bash
# Builds the ORAS CLI (`oras`), which tests use to push and pull OCI artifacts such as Wasm
# plugins, from its Go module at a pinned version through the Go module proxy, and caches it
# outside the repository. Unlike Kubernetes and etcd (build-control-plane.sh), oras's go.mod has no
# `replace` directives, so a plain `go install module@version` builds it.
#
# The toolchain is the installed Go (GOTOOLCHAIN=local unless set): this machine cannot download
# another, so a module wanting a newer Go must fail here, with its message, not hang on a fetch.
#
# Prints the binary's path on its last line. A warm cache returns at once.
set -euo pipefail

ORAS_VERSION="${MIMEO_ORAS_VERSION:-v1.3.6}"
CACHE_ROOT="${MIMEO_CACHE_DIR:-$HOME/.cache/mimeo}"
BIN_DIR="$CACHE_ROOT/oras/$ORAS_VERSION"
BIN="$BIN_DIR/oras"

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

log() { echo "build-oras: $*" >&2; }

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$BIN_DIR"

# One build at a time: test binaries and CI may ask at once.
exec 9>"$CACHE_ROOT/oras/.lock"
flock 9
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

start=$SECONDS
log "building oras.land/oras $ORAS_VERSION with $(go env GOVERSION)"
# Into a scratch directory first, so an interrupted build never leaves a half-written binary at
# the cached path that the next run would take as done.
scratch="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
GOBIN="$scratch" go install -trimpath -ldflags "-s -w" "oras.land/oras/cmd/oras@$ORAS_VERSION"
mv "$scratch/oras" "$BIN"
log "built $("$BIN" version | head -1) in $((SECONDS - start)) s into $BIN_DIR"
echo "$BIN"
