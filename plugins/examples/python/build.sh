#!/usr/bin/env bash
# Builds add-annotation-python.wasm with componentize-py.
#
# Installs componentize-py (PyPI) into a venv under $MIMEO_TOOLCHAINS (default
# ~/.cache/mimeo/toolchains) the first time; later runs reuse it. Writes the component to
# ${MIMEO_PLUGIN_OUT:-~/.cache/mimeo/plugins}/ and prints that directory as the last stdout line.
# Needs: python3 with venv (3.9 or newer), network access to PyPI on the first run.
#
# MIMEO_PYTHON_STUB_WASI=1 builds with --stub-wasi: every WASI import is replaced by a stub that
# traps, so the component imports nothing but mimeo:transform/log (print(), time, open() and
# os.environ then trap instead of reaching the host).
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${MIMEO_TOOLCHAINS:-$HOME/.cache/mimeo/toolchains}"
out="${MIMEO_PLUGIN_OUT:-$HOME/.cache/mimeo/plugins}"
# The WIT package: the repository's wit/ folder, or MIMEO_WIT (a folder holding transform.wit).
wit="${MIMEO_WIT:-$here/../../../wit}"
venv="$tools/componentize-py-$COMPONENTIZE_PY_VERSION"

log() { echo "[python] $*" >&2; }

if [[ ! -f "$wit/transform.wit" ]]; then
    log "no transform.wit in $wit: set MIMEO_WIT to the folder that holds it"
    exit 1
fi

if ! "$venv/bin/componentize-py" --version 2>/dev/null | grep -qF "$COMPONENTIZE_PY_VERSION"; then
    log "installing componentize-py $COMPONENTIZE_PY_VERSION into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION" >&2
fi
log "$("$venv/bin/componentize-py" --version)"

mkdir -p "$out"
target="$out/add-annotation-python.wasm"
log "componentize app.py -> $target"
# componentize-py writes its own bindings (package wit_world) while it builds, and puts the
# Python standard library and app.py into the component. It runs from a copy so that no
# __pycache__ lands next to the source.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/app.py" "$work/"
stub=()
if [[ "${MIMEO_PYTHON_STUB_WASI:-0}" == 1 ]]; then
    stub=(--stub-wasi)
    log "--stub-wasi: no WASI imports"
fi
(cd "$work" && "$venv/bin/componentize-py" -d "$wit" -w plugin componentize "${stub[@]}" app \
    -o "$target.tmp" >&2)
mv "$target.tmp" "$target"
log "built $target ($(stat -c %s "$target") bytes)"
echo "$out"
