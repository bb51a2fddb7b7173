#!/usr/bin/env bash
# Builds add-annotation-javascript.wasm with componentize-js.
#
# Installs @bytecodealliance/componentize-js (npm) under $MIMEO_TOOLCHAINS (default
# ~/.cache/mimeo/toolchains) the first time; later runs reuse it. Writes the component to
# ${MIMEO_PLUGIN_OUT:-~/.cache/mimeo/plugins}/ and prints that directory as the last stdout line.
#   ./build.sh                     # add-annotation.js -> add-annotation-javascript.wasm
#   ./build.sh SOURCE.js OUT.wasm  # another module, with the same toolchain and flags
# Needs: node 18 or newer and npm, network access to the npm registry on the first run.
set -euo pipefail

COMPONENTIZE_JS_VERSION=0.23.0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${MIMEO_TOOLCHAINS:-$HOME/.cache/mimeo/toolchains}"
out="${MIMEO_PLUGIN_OUT:-$HOME/.cache/mimeo/plugins}"
# The WIT package: the repository's wit/ folder, or MIMEO_WIT (a folder holding transform.wit).
wit="${MIMEO_WIT:-$here/../../../wit}"
prefix="$tools/componentize-js-$COMPONENTIZE_JS_VERSION"
cjs="$prefix/node_modules/.bin/componentize-js"

log() { echo "[javascript] $*" >&2; }

if [[ ! -f "$wit/transform.wit" ]]; then
    log "no transform.wit in $wit: set MIMEO_WIT to the folder that holds it"
    exit 1
fi

if ! "$cjs" --version 2>/dev/null | grep -qxF "$COMPONENTIZE_JS_VERSION"; then
    log "installing @bytecodealliance/componentize-js $COMPONENTIZE_JS_VERSION into $prefix"
    rm -rf "$prefix"
    mkdir -p "$prefix"
    echo '{"name": "mimeo-componentize-js", "private": true}' >"$prefix/package.json"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
        "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION" >&2
fi
log "componentize-js $("$cjs" --version), node $(node --version)"

source="${1:-$here/add-annotation.js}"
target="${2:-$out/add-annotation-javascript.wasm}"
mkdir -p "$(dirname "$target")"
log "componentize $(basename "$source") -> $target"
# --disable drops the engine's own WASI uses (console output, random, clocks, fetch), so the
# component imports only what the world names. console.log does nothing then: log through the
# `log` import.
"$cjs" "$source" --wit "$wit" --world-name plugin \
    --disable stdio random clocks http fetch-event \
    -o "$target.tmp" >&2
mv "$target.tmp" "$target"
log "built $target ($(stat -c %s "$target") bytes)"
echo "$(dirname "$target")"
