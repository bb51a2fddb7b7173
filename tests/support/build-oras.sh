#!/usr/bin/env bash
# Builds the ORAS CLI (`oras`), which tests use to push and pull OCI artifacts such as Wasm
# plugins, from its Go module at a pinned version, and caches it outside the repository
# (go-install-cached.sh).
#
# Prints the binary's path on its last line. A warm cache returns at once.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-install-cached.sh"

go_install_cached oras "${MIMEO_ORAS_VERSION:-v1.3.6}" oras.land/oras/cmd/oras
