# Sourced by build-helm.sh and build-oras.sh: builds a Go command with `go install module@version`
# through the Go module proxy, once, into a cache outside the repository. Only for modules whose
# go.mod has no `replace` directives (Kubernetes and etcd have them: build-control-plane.sh).
#
# The toolchain is the installed Go (GOTOOLCHAIN=local unless set): this machine cannot download
# another, so a module wanting a newer Go must fail here, with its message, not hang on a fetch.

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

# go_install_cached NAME VERSION PACKAGE [LDFLAGS_FUNCTION]
#
# Prints the path of $MIMEO_CACHE_DIR/NAME/VERSION/NAME (default cache ~/.cache/mimeo) on its
# last line, building it first unless it is there. LDFLAGS_FUNCTION, if given, is called with the
# version directory as its working directory and prints extra -ldflags; it runs only for a build.
go_install_cached() {
  local name="$1" version="$2" package="$3" ldflags_function="${4:-}"
  local cache_root="${MIMEO_CACHE_DIR:-$HOME/.cache/mimeo}"
  local bin_dir="$cache_root/$name/$version"
  local bin="$bin_dir/$name"
  log() { echo "build-$name: $*" >&2; }

  if [[ -x "$bin" ]]; then
    echo "$bin"
    return 0
  fi
  command -v go >/dev/null || { log "go is not installed"; return 1; }
  mkdir -p "$bin_dir"

  # One build at a time: test binaries and CI may ask at once.
  exec 9>"$cache_root/$name/.lock"
  flock 9
  if [[ -x "$bin" ]]; then
    echo "$bin"
    return 0
  fi

  local start=$SECONDS ldflags="-s -w"
  log "building $package $version with $(go env GOVERSION)"
  if [[ -n "$ldflags_function" ]]; then
    ldflags+=" $(cd "$bin_dir" && "$ldflags_function")" || return 1
  fi
  # Into a scratch directory first, so an interrupted build never leaves a half-written binary at
  # the cached path that the next run would take as done.
  local scratch
  scratch="$(mktemp -d "$bin_dir/.build.XXXXXX")"
  # shellcheck disable=SC2064 # expanded now: $scratch is local to this function
  trap "rm -rf '$scratch'" EXIT
  GOBIN="$scratch" go install -trimpath -ldflags "$ldflags" "$package@$version"
  mv "$scratch/$name" "$bin"
  log "built $name $version in $((SECONDS - start)) s into $bin_dir"
  echo "$bin"
}
