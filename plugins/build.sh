#!/usr/bin/env bash
# Builds mimeo's first-party plugins as WebAssembly components (wasm32-wasip2, release) and copies
# them to ${MIMEO_PLUGIN_OUT:-$HOME/.cache/mimeo/plugins} as <name>.wasm. Progress goes to stderr;
# the last line on stdout is that directory. Cargo's own build cache lives in
# ${MIMEO_PLUGIN_TARGET_DIR:-$HOME/.cache/mimeo/target-plugins}, so a run with nothing changed
# takes about a second.
set -euo pipefail
cd "$(dirname "$0")"

out="${MIMEO_PLUGIN_OUT:-$HOME/.cache/mimeo/plugins}"
# Deliberately not $CARGO_TARGET_DIR: CI points that at the controller's build, whose profiles
# and dependency versions differ; sharing it would rebuild both back and forth.
export CARGO_TARGET_DIR="${MIMEO_PLUGIN_TARGET_DIR:-$HOME/.cache/mimeo/target-plugins}"
target=wasm32-wasip2
plugins=(filter-keys rename-keys set-metadata rewrite-namespace template misbehave stall-describe legacy-v0-1)

if command -v rustup >/dev/null; then
  rustup target list --installed | grep -qx "$target" || rustup target add "$target" >&2
else
  echo "build.sh: rustup not found; assuming the $target standard library is installed" >&2
fi

echo "build.sh: cargo build --release --target $target (plugins workspace)" >&2
cargo build --release --locked --target "$target" --workspace >&2

mkdir -p "$out"
for name in "${plugins[@]}"; do
  built="$CARGO_TARGET_DIR/$target/release/${name//-/_}.wasm"
  dest="$out/$name.wasm"
  # Replace atomically, and only when the component changed, so readers never see half a file
  # and mtimes stay put when nothing changed.
  if ! cmp -s "$built" "$dest"; then
    cp "$built" "$dest.tmp.$$"
    mv -f "$dest.tmp.$$" "$dest"
  fi
  echo "build.sh: $dest ($(wc -c <"$dest") bytes)" >&2
done
echo "$out"
