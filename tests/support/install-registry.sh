#!/usr/bin/env bash
# Installs the CNCF distribution registry (Debian's `docker-registry` package, /usr/bin/docker-registry)
# that the tests start on loopback as a real OCI registry (see src/registry.rs). Idempotent: when
# the binary is already on PATH it only makes sure no system registry is running, and returns at
# once.
#
# The package ships a SysV init script and a systemd unit whose postinst starts a registry on
# :5000 with the package's own config. Tests never use that one (each starts its own on a free
# port), and a stray listener on :5000 would only confuse; so after an install it is stopped, and
# its boot links removed, whether or not the machine's policy-rc.d already prevented the start.
# (On this project's machines there is no systemd, /usr/sbin/policy-rc.d refuses every start, and
# invoke-rc.d finds no runlevel: the postinst starts nothing. The stop is for other machines.)
#
# Prints the binary's path on its last line.
set -euo pipefail

log() { echo "install-registry: $*" >&2; }

# Stops the package's own service if it runs, and keeps it from starting at boot.
stop_system_registry() {
  local pidfile=/var/run/docker-registry.pid
  if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
    systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
  fi
  if [[ -f "$pidfile" ]]; then
    if start-stop-daemon --stop --quiet --retry 5 --pidfile "$pidfile" \
        --exec /usr/bin/docker-registry >/dev/null 2>&1; then
      log "stopped the package's system registry (it listened on :5000)"
    fi
    rm -f "$pidfile"
  fi
  if [[ -x /etc/init.d/docker-registry ]] && command -v update-rc.d >/dev/null; then
    update-rc.d docker-registry disable >/dev/null 2>&1 || true
  fi
}

if bin="$(command -v docker-registry)"; then
  stop_system_registry
  echo "$bin"
  exit 0
fi

[[ "$(id -u)" == 0 ]] || { log "docker-registry is missing and installing it needs root"; exit 1; }

start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
apt_install() {
  apt-get install -y -qq --no-install-recommends docker-registry >/dev/null 2>"${1:-/dev/null}"
}
# The package lists may be stale or absent on a fresh machine: update only when the install fails.
errors="$(mktemp)"
trap 'rm -f "$errors"' EXIT
if ! apt_install "$errors"; then
  log "apt-get install failed; running apt-get update and trying again"
  apt-get update -qq >/dev/null
  apt_install "$errors" || { cat "$errors" >&2; exit 1; }
fi
stop_system_registry

bin="$(command -v docker-registry)" || { log "docker-registry is still missing after the install"; exit 1; }
log "installed $(dpkg-query -W -f '${Version}' docker-registry) in $((SECONDS - start)) s"
echo "$bin"
