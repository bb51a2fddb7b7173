#!/usr/bin/env bash
# Builds kstatus/ (a reader of objects through sigs.k8s.io/cli-utils' kstatus, the library behind
# Flux's health checks) with its pinned go.mod and go.sum, through the Go module proxy, once per
# version of its sources, into a cache outside the repository.
#
# Prints the binary's path on its last line. A warm cache returns at once.
set -euo pipefail

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/kstatus" && pwd)"
cache_root="${MIMEO_CACHE_DIR:-$HOME/.cache/mimeo}"
version="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-16)"
bin_dir="$cache_root/kstatus/$version"
bin="$bin_dir/kstatus"
log() { echo "build-kstatus: $*" >&2; }

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$bin_dir"
exec 9>"$cache_root/kstatus/.lock"
flock 9
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi
start=$SECONDS
# Into a scratch file first, so an interrupted build never leaves a half-written binary behind.
(cd "$here" && go build -trimpath -ldflags "-s -w" -o "$bin.partial" .)
mv "$bin.partial" "$bin"
log "built kstatus in $((SECONDS - start)) s into $bin_dir"
echo "$bin"
