#!/usr/bin/env bash
# Runs the built example plugins against their fixtures, outside mimeo, in two hosts:
#   wasmtime - wasmtime-py (PyPI `wasmtime`), WASI 0.2 with an empty context, a fresh store per
#              call: the way mimeo runs plugins (run_fixtures_wasmtime.py);
#   jco      - the component transpiled to JS + core Wasm by @bytecodealliance/jco and run in
#              node (run-fixtures.mjs): a second, independent implementation of the ABI.
#
#   ./run-fixtures.sh                       # every built language, both hosts
#   ./run-fixtures.sh python c              # just these
#   ./run-fixtures.sh --host wasmtime go    # one host
#
# Components are read from ${MIMEO_PLUGIN_OUT:-~/.cache/mimeo/plugins}/add-annotation-<lang>.wasm.
# The first run installs wasmtime + PyYAML (PyPI, in a venv) and jco + yaml (npm) under
# $MIMEO_TOOLCHAINS (default ~/.cache/mimeo/toolchains). Also checks that every language has the
# same fixtures. Exits non-zero when a case fails, a fixtures folder differs, or a component named
# on the command line is missing.
set -euo pipefail

WASMTIME_PY_VERSION=50.0.1
PYYAML_VERSION=6.0.3
JCO_VERSION=1.35.0
YAML_VERSION=2.8.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${MIMEO_TOOLCHAINS:-$HOME/.cache/mimeo/toolchains}"
out="${MIMEO_PLUGIN_OUT:-$HOME/.cache/mimeo/plugins}"
all=(python javascript c go)

hosts=(wasmtime jco)
langs=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --host)
        [[ "${2:-}" == wasmtime || "${2:-}" == jco ]] || { echo "--host wasmtime|jco" >&2; exit 2; }
        hosts=("$2")
        shift 2
        ;;
    python | javascript | c | go)
        langs+=("$1")
        shift
        ;;
    *)
        echo "usage: $0 [--host wasmtime|jco] [python] [javascript] [c] [go]" >&2
        exit 2
        ;;
    esac
done

status=0
for lang in "${all[@]:1}"; do
    if ! diff -r "$here/${all[0]}/fixtures" "$here/$lang/fixtures" >/dev/null; then
        echo "FAIL  fixtures: $lang/fixtures differs from ${all[0]}/fixtures" >&2
        status=1
    fi
done

if [[ ${#langs[@]} -eq 0 ]]; then
    for lang in "${all[@]}"; do
        if [[ -f "$out/add-annotation-$lang.wasm" ]]; then
            langs+=("$lang")
        else
            echo "skip  add-annotation-$lang: $out/add-annotation-$lang.wasm is not built" >&2
        fi
    done
fi

for host in "${hosts[@]}"; do
    case "$host" in
    wasmtime)
        venv="$tools/fixture-runner-wasmtime-$WASMTIME_PY_VERSION"
        if ! "$venv/bin/python" -c 'import wasmtime, yaml' 2>/dev/null; then
            echo "[fixtures] installing wasmtime $WASMTIME_PY_VERSION and PyYAML into $venv" >&2
            rm -rf "$venv"
            python3 -m venv "$venv"
            "$venv/bin/pip" install --quiet --disable-pip-version-check \
                "wasmtime==$WASMTIME_PY_VERSION" "PyYAML==$PYYAML_VERSION" >&2
        fi
        run() { "$venv/bin/python" "$here/run_fixtures_wasmtime.py" --fixtures "$2" --name "$3" "$1"; }
        ;;
    jco)
        prefix="$tools/fixture-runner-jco-$JCO_VERSION"
        if [[ ! -x "$prefix/node_modules/.bin/jco" || ! -d "$prefix/node_modules/yaml" ]]; then
            echo "[fixtures] installing @bytecodealliance/jco $JCO_VERSION and yaml $YAML_VERSION into $prefix" >&2
            mkdir -p "$prefix"
            echo '{"name": "mimeo-fixture-runner", "private": true, "type": "module"}' >"$prefix/package.json"
            npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
                "@bytecodealliance/jco@$JCO_VERSION" "yaml@$YAML_VERSION" >&2
        fi
        # componentize-py output uses extended-const, which node 20 keeps behind a flag (later
        # versions have it on and may not know the flag).
        node_flags=()
        if node --experimental-wasm-extended-const -e 0 2>/dev/null; then
            node_flags+=(--experimental-wasm-extended-const)
        fi
        run() {
            node "${node_flags[@]}" "$here/run-fixtures.mjs" --prefix "$prefix" --wasm "$1" \
                --fixtures "$2" --name "$3" --work "$prefix/transpiled"
        }
        ;;
    esac
    for lang in "${langs[@]}"; do
        wasm="$out/add-annotation-$lang.wasm"
        if [[ ! -f "$wasm" ]]; then
            echo "FAIL  add-annotation-$lang: $wasm is not built" >&2
            status=1
            continue
        fi
        echo "--- $host: add-annotation-$lang"
        run "$wasm" "$here/$lang/fixtures" "add-annotation-$lang" || status=1
    done
done
exit $status
