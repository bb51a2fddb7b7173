#!/usr/bin/env bash
# Builds promtool, which tests use to check and unit-test the chart's PrometheusRule and to parse
# the dashboard's queries, from the Prometheus Go module at a pinned version, and caches it outside
# the repository (go-install-cached.sh). Prometheus 3.N.x is published as the module version
# v0.3NN.x (v0.316.0 is Prometheus 3.16.0); its go.mod has no `replace`, so `go install` takes it.
#
# The version is set with -ldflags as Prometheus's own build (promu) sets it; without that
# `promtool --version` prints an empty version.
#
# Prints the binary's path on its last line. A warm cache returns at once; a cold one downloads
# and compiles the whole Prometheus module: 594 s on a busy 2-core machine.
# The tests run it on first use (tests/support/src/binaries.rs), as they run the other scripts.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-install-cached.sh"

PROMETHEUS_VERSION="${MIMEO_PROMETHEUS_VERSION:-v0.316.0}"

# v0.316.0 -> 3.16.0, as Prometheus's release names it.
promtool_ldflags() {
  local minor_patch="${PROMETHEUS_VERSION#v0.3}"
  local minor="${minor_patch%%.*}" patch="${minor_patch#*.}"
  echo -n "-X github.com/prometheus/common/version.Version=3.$((10#$minor)).$patch"
}

go_install_cached promtool "$PROMETHEUS_VERSION" \
  github.com/prometheus/prometheus/cmd/promtool promtool_ldflags
