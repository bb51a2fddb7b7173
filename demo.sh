#!/usr/bin/env bash
# The local demo: a real etcd + kube-apiserver on loopback, mimeo running against it, a second
# control plane (workload-b) as another cluster to copy into, and the scenarios in examples/ played
# through, with nothing but Rust and Go installed.
#
#   ./demo.sh          (or ./demo.sh up)   build what is needed, start everything, walk through
#   ./demo.sh down                         stop mimeo and both control planes, remove .demo/
#
# The first run builds etcd, kube-apiserver and kubectl from their Go modules (several minutes,
# once; cached in ~/.cache/mimeo). Everything the demo runs writes into .demo/: the kubeconfigs
# (workload-b's in .demo/cluster-b/), the logs and the pid files. Nothing listens on anything but
# 127.0.0.1.
#
# The processes are managed by envtest (tests/support/src/bin/envtest/, built with the demo):
# `envtest start` runs each control plane detached and waits until it is ready, `envtest spawn`
# does the same for mimeo until its HTTP port answers, `envtest running` tells whether a demo
# runs, and `envtest stop` stops them (SIGTERM, then SIGKILL after 20 s). This script holds the
# scenarios.
#
# Settings: CARGO_TARGET_DIR (default ~/.cache/mimeo/target), MIMEO_DEMO_HTTP_ADDR (mimeo's
# --http-addr, default 127.0.0.1:18080), MIMEO_DEMO_TIMEOUT (seconds per wait, default 60).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"

STATE="$ROOT/.demo"
KUBECONFIG_PATH="$STATE/kubeconfig"
# The second cluster, workload-b: its own envtest with its own state directory (kubeconfig,
# envtest.pid, ready) inside .demo/, and no CRDs.
STATE_B="$STATE/cluster-b"
KUBECONFIG_B="$STATE_B/kubeconfig"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/mimeo/target}"
HTTP_ADDR="${MIMEO_DEMO_HTTP_ADDR:-127.0.0.1:18080}"
TIMEOUT="${MIMEO_DEMO_TIMEOUT:-60}"
MIMEO="$CARGO_TARGET_DIR/debug/mimeo"
ENVTEST="$CARGO_TARGET_DIR/debug/envtest"

# For the error and interrupt handlers: the `envtest start` commands still waiting for the
# control planes, whether anything was started, whether mimeo was, and whether up has finished.
STARTING=()
STARTED=""
MIMEO_STARTED=""
UP_DONE=""

step() { printf '\n== %s\n' "$*"; }
say() { printf '%s\n' "$*"; }
indent() { sed 's/^/    /'; }
die() {
  printf '\ndemo: error: %s\n' "$1" >&2
  if [[ -n "${2:-}" && -s "$2" ]]; then
    printf -- '--- last lines of %s ---\n' "${2#"$ROOT"/}" >&2
    tail -n 25 "$2" >&2
  fi
  exit 1
}

usage() {
  cat <<'EOF'
usage: ./demo.sh [up|down]

  up     (the default) build mimeo and two local control planes, start them, and walk through
         the scenarios in examples/; everything keeps running afterwards
  down   stop mimeo and both control planes and remove .demo/
EOF
}

# --- processes ------------------------------------------------------------------------------

# Builds envtest, which starts, finds and stops the demo's processes (down may come before any up
# built it); a no-op when it is up to date. With --workspace, as up builds it, so that the two
# builds agree on features and neither rebuilds the other's.
need_envtest() {
  cargo build --quiet --workspace --bin envtest
}

# Stops mimeo, then both control planes at once; says what it stopped, nothing if nothing ran.
stop_all() {
  local status=0
  "$ENVTEST" stop --pid-file "$STATE/mimeo.pid" || status=$?
  "$ENVTEST" stop --state-dir "$STATE" --state-dir "$STATE_B" || status=$?
  return "$status"
}

# Fails with the relevant log when mimeo or a control plane has died.
check_alive() {
  [[ -n "$STARTED" ]] || return 0
  "$ENVTEST" running --state-dir "$STATE" >/dev/null ||
    die "the control plane (envtest) exited" "$STATE/envtest.log"
  "$ENVTEST" running --state-dir "$STATE_B" >/dev/null ||
    die "workload-b's control plane (envtest) exited" "$STATE/envtest-b.log"
  [[ -z "$MIMEO_STARTED" ]] || "$ENVTEST" running --pid-file "$STATE/mimeo.pid" >/dev/null ||
    die "mimeo exited" "$STATE/mimeo.log"
}

# --- waiting --------------------------------------------------------------------------------

now_ms() { date +%s%3N; }
since() { local ms=$(($(now_ms) - $1)); printf '%d.%01d s' $((ms / 1000)) $((ms % 1000 / 100)); }

# poll COMMAND...: runs COMMAND until it succeeds, for at most $TIMEOUT seconds; fails on timeout.
poll() {
  local deadline=$((SECONDS + TIMEOUT))
  # In a subshell: an interrupt handled meanwhile must not inherit the redirection.
  until ("$@") >/dev/null 2>&1; do
    check_alive
    ((SECONDS < deadline)) || return 1
    sleep 0.25
  done
}

# wait_for WHAT COMMAND...: poll, and stop the demo with mimeo's log on timeout.
wait_for() {
  local what="$1"
  shift
  poll "$@" || die "timed out after ${TIMEOUT} s waiting for $what" "$STATE/mimeo.log"
}

# --- kubectl helpers ------------------------------------------------------------------------

kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
# kubectl for workload-b, the second cluster.
kcb() { "$KUBECTL" --kubeconfig "$KUBECONFIG_B" "$@"; }

# Shows a kubectl command line, then runs it with its output indented.
show() {
  say "\$ kubectl $*"
  if ! kc "$@" 2>&1 | indent; then
    die "kubectl $* failed"
  fi
}

# The same in workload-b.
show_b() {
  say "\$ kubectl --kubeconfig .demo/cluster-b/kubeconfig $*"
  if ! kcb "$@" 2>&1 | indent; then
    die "kubectl --kubeconfig .demo/cluster-b/kubeconfig $* failed"
  fi
}

exists() { kc get "$@" -o name >/dev/null 2>&1; }

# Whether the object is gone (NotFound); fails on any other error, too.
gone() {
  local out
  out="$(kc get "$@" --ignore-not-found -o name 2>/dev/null)" && [[ -z "$out" ]]
}

# A short hash of an object's data field: CLIENT (kc or kcb) KIND NAME NAMESPACE. Never prints
# values themselves.
hash_in() {
  "$1" get "$2" "$3" -n "$4" -o 'jsonpath={.data}' | sha256sum | cut -c1-12
}
data_hash() { hash_in kc "$@"; }
data_hash_b() { hash_in kcb "$@"; }

same_data() { [[ "$(data_hash "$1" "$2" "$3")" == "$(data_hash "$1" "$4" "$5")" ]]; }
# KIND NAME NAMESPACE here, NAME NAMESPACE in workload-b.
same_data_b() { [[ "$(data_hash "$1" "$2" "$3")" == "$(data_hash_b "$1" "$4" "$5")" ]]; }

# Whether SyncRule NAMESPACE/NAME reports COPIES (synced/total) in status and is Ready.
rule_reports() {
  local copies ready
  copies="$(kc get syncrule "$2" -n "$1" -o 'jsonpath={.status.copies}')"
  ready="$(kc get syncrule "$2" -n "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')"
  [[ "$copies" == "$3" && "$ready" == "True" ]]
}

# wait_rule NAMESPACE NAME COPIES: waits for the rule's status to say COPIES and Ready=True.
wait_rule() {
  poll rule_reports "$@" || die "timed out after ${TIMEOUT} s waiting for SyncRule $1/$2 to report \
status.copies=$3 and condition Ready=True; its status is: $(kc get syncrule "$2" -n "$1" -o 'jsonpath={.status}' 2>&1)" \
    "$STATE/mimeo.log"
}

# Whether ClusterSyncRule NAME reports COPIES (synced/total) in status and is Ready.
cluster_rule_reports() {
  local copies ready
  copies="$(kc get clustersyncrule "$1" -o 'jsonpath={.status.copies}')"
  ready="$(kc get clustersyncrule "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')"
  [[ "$copies" == "$2" && "$ready" == "True" ]]
}

# wait_cluster_rule NAME COPIES: waits for the rule's status to say COPIES and Ready=True.
wait_cluster_rule() {
  poll cluster_rule_reports "$@" || die "timed out after ${TIMEOUT} s waiting for ClusterSyncRule $1 to \
report status.copies=$2 and condition Ready=True; its status is: $(kc get clustersyncrule "$1" -o 'jsonpath={.status}' 2>&1)" \
    "$STATE/mimeo.log"
}

# Whether RemoteCluster NAME is Ready=True with reason Connected.
remote_connected() {
  local ready
  ready="$(kc get remotecluster "$1" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}')"
  [[ "$ready" == "True Connected" ]]
}

# Whether RemoteCluster NAME counts N rules using it in status.rules.
remote_counts_rules() {
  [[ "$(kc get remotecluster "$1" -o 'jsonpath={.status.rules}')" == "$2" ]]
}

managed_label() {
  kc get "$1" "$2" -n "$3" -o 'jsonpath={.metadata.labels.mimeo\.dev/managed-by}'
}

# Checks and reports one copy: KIND SOURCE-NS SOURCE-NAME TARGET-NS TARGET-NAME STARTED-MS.
report_copy() {
  local kind="$1" sns="$2" sname="$3" tns="$4" tname="$5" started="$6" label
  label="$(managed_label "$kind" "$tname" "$tns")"
  [[ "$label" == mimeo ]] ||
    die "the copy $tns/$tname has label mimeo.dev/managed-by=\"$label\", expected \"mimeo\"" "$STATE/mimeo.log"
  same_data "$kind" "$sname" "$sns" "$tname" "$tns" ||
    die "the copy $tns/$tname holds other data than its source $sns/$sname" "$STATE/mimeo.log"
  say "copied $sns/$sname -> $tns/$tname within $(since "$started")  (data sha256 $(data_hash "$kind" "$tname" "$tns"), same as the source; labelled mimeo.dev/managed-by=mimeo)"
}

# The same for a copy in workload-b.
report_copy_b() {
  local kind="$1" sns="$2" sname="$3" tns="$4" tname="$5" started="$6" label
  label="$(kcb get "$kind" "$tname" -n "$tns" -o 'jsonpath={.metadata.labels.mimeo\.dev/managed-by}')"
  [[ "$label" == mimeo ]] ||
    die "the copy workload-b:$tns/$tname has label mimeo.dev/managed-by=\"$label\", expected \"mimeo\"" "$STATE/mimeo.log"
  same_data_b "$kind" "$sname" "$sns" "$tname" "$tns" ||
    die "the copy workload-b:$tns/$tname holds other data than its source $sns/$sname" "$STATE/mimeo.log"
  say "copied $sns/$sname -> workload-b:$tns/$tname within $(since "$started")  (data sha256 $(data_hash_b "$kind" "$tname" "$tns"), same as the source; labelled mimeo.dev/managed-by=mimeo)"
}

# Gives the dockerconfigjson Secret NAMESPACE/NAME a new password for USER at registry.example.com,
# showing the command without the value.
rotate_dockerconfig() {
  local ns="$1" name="$2" user="$3" password new_json
  password="rotated-$(date +%s%N)"
  new_json="$(printf '{"auths":{"registry.example.com":{"username":"%s","password":"%s","auth":"%s"}}}' \
    "$user" "$password" "$(printf '%s:%s' "$user" "$password" | base64 -w0)")"
  say "\$ kubectl patch secret $name -n $ns --type merge -p '{\"data\":{\".dockerconfigjson\":\"...\"}}'"
  kc patch secret "$name" -n "$ns" --type merge \
    -p "{\"data\":{\".dockerconfigjson\":\"$(printf '%s' "$new_json" | base64 -w0)\"}}" | indent ||
    die "patching the source Secret $ns/$name failed"
}

# --- up -------------------------------------------------------------------------------------

on_exit() {
  local status=$?
  if [[ -z "$UP_DONE" && $status -ne 0 && -n "$STARTED" ]]; then
    printf '\nThe demo stopped early. Logs: .demo/envtest.log, .demo/envtest-b.log, .demo/mimeo.log\n' >&2
    printf 'What was started is still running, for a look around; ./demo.sh down stops it.\n' >&2
  fi
}

on_interrupt() {
  trap - INT TERM
  printf '\ninterrupted: stopping the demo\n' >&2
  # A control plane still starting is stopped by its envtest start, on SIGTERM.
  if ((${#STARTING[@]} > 0)); then
    kill -TERM "${STARTING[@]}" 2>/dev/null || true
    wait "${STARTING[@]}" 2>/dev/null || true
  fi
  stop_all || true
  rm -rf "$STATE"
  STARTED=""
  exit 130
}

up() {
  local pid
  need_envtest
  if pid="$("$ENVTEST" running --state-dir "$STATE")"; then
    say "A demo is already running (control plane: envtest pid $pid)."
    if pid="$("$ENVTEST" running --state-dir "$STATE_B")"; then
      say "workload-b's control plane is running too (envtest pid $pid)."
    else
      say "workload-b's control plane is NOT running; see .demo/envtest-b.log, and start afresh with ./demo.sh down && ./demo.sh"
    fi
    if pid="$("$ENVTEST" running --pid-file "$STATE/mimeo.pid")"; then
      say "mimeo is running too (pid $pid), logging to .demo/mimeo.log."
    else
      say "mimeo is NOT running; see .demo/mimeo.log, and start afresh with ./demo.sh down && ./demo.sh"
    fi
    say "kubeconfigs: $KUBECONFIG_PATH (mimeo's cluster), $KUBECONFIG_B (workload-b)"
    say "Stop it with: ./demo.sh down"
    exit 0
  fi
  if [[ -e "$STATE" ]]; then
    say "Clearing what an earlier demo left in .demo/"
    down quiet
  fi

  local host="${HTTP_ADDR%:*}" port="${HTTP_ADDR##*:}"
  if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
    die "something already listens on $HTTP_ADDR, where mimeo's HTTP server should go; stop it or set MIMEO_DEMO_HTTP_ADDR"
  fi

  step "Control-plane binaries: etcd, kube-apiserver, kubectl (built from source on first use: several minutes, once)"
  local bin_dir
  bin_dir="$(bash tests/support/build-control-plane.sh | tail -n 1)"
  KUBECTL="$bin_dir/kubectl"
  [[ -x "$KUBECTL" ]] || die "tests/support/build-control-plane.sh named $bin_dir, which holds no kubectl"
  say "in $bin_dir"

  step "Building mimeo and envtest (cargo, into $CARGO_TARGET_DIR)"
  cargo build --workspace --bin mimeo --bin envtest

  step "Building the first-party transform plugins (Rust, wasm32-wasip2; plugins/build.sh)"
  PLUGIN_DIR="$(bash plugins/build.sh | tail -n 1)"
  [[ -f "$PLUGIN_DIR/filter-keys.wasm" ]] || die "plugins/build.sh named $PLUGIN_DIR, which holds no filter-keys.wasm"
  say "in $PLUGIN_DIR"

  "$MIMEO" run --help >/dev/null 2>&1 ||
    die "this build of mimeo has no working 'mimeo run' command ($MIMEO run --help fails)"

  trap on_exit EXIT
  trap on_interrupt INT TERM
  mkdir -p "$STATE"

  step "Starting two control planes, each an etcd + kube-apiserver on loopback, side by side"
  say "the one mimeo runs against, with mimeo's CRDs (state: .demo/), and workload-b, a second"
  say "cluster for mimeo to copy into (state: .demo/cluster-b/)"
  # Both at once. Each envtest start waits for its plane; if that fails, it stops it and shows
  # the log's last lines.
  local failed=""
  STARTED=1
  MIMEO_ENVTEST_BIN_DIR="$bin_dir" "$ENVTEST" start --state-dir .demo --crds crds/mimeo.yaml \
    --log .demo/envtest.log --timeout $((TIMEOUT + 60)) >/dev/null &
  STARTING+=($!)
  MIMEO_ENVTEST_BIN_DIR="$bin_dir" "$ENVTEST" start --state-dir .demo/cluster-b \
    --log .demo/envtest-b.log --timeout $((TIMEOUT + 60)) >/dev/null &
  STARTING+=($!)
  wait "${STARTING[0]}" || failed="the control plane (.demo/envtest.log)"
  wait "${STARTING[1]}" || failed="${failed:+$failed and }workload-b's control plane (.demo/envtest-b.log)"
  STARTING=()
  if [[ -n "$failed" ]]; then
    stop_all
    STARTED=""
    die "$failed failed to start"
  fi

  step "Starting mimeo (log: .demo/mimeo.log, JSON)"
  MIMEO_STARTED=1
  KUBECONFIG="$KUBECONFIG_PATH" "$ENVTEST" spawn --pid-file .demo/mimeo.pid --log .demo/mimeo.log \
    --wait-tcp "$HTTP_ADDR" --timeout "$TIMEOUT" -- \
    "$MIMEO" run --log-format json --http-addr "$HTTP_ADDR" --plugin-dir "$PLUGIN_DIR" \
    --next-to-kinds Cluster.clusters.openmcp.cloud ||
    die "mimeo did not start serving HTTP on $HTTP_ADDR"

  scenario_registry_credentials
  scenario_fan_out
  scenario_rotation
  scenario_plugin_chain
  scenario_assembled_pull_secret
  scenario_new_namespace
  scenario_relabel
  scenario_remote_pull_secret
  scenario_remote_rotation
  scenario_helmdeployer

  step "Where things stand"
  show get syncrules -A
  show get clustersyncrules
  show get remoteclusters
  show get clusterinventories
  show get secrets,configmaps -A -l mimeo.dev/managed-by=mimeo
  show_b get secrets -A -l mimeo.dev/managed-by=mimeo

  UP_DONE=1
  trap - INT TERM
  cat <<EOF

The demo keeps running: two control planes and mimeo, on this machine only.

  kubeconfigs  $KUBECONFIG_PATH
                 the cluster mimeo runs in: the rules, the RemoteCluster, the sources
               $KUBECONFIG_B
                 workload-b, the RemoteCluster: the copy in namespace apps
  try          $KUBECTL --kubeconfig $KUBECONFIG_PATH get syncrules,clustersyncrules -A
               $KUBECTL --kubeconfig $KUBECONFIG_PATH get remoteclusters
               $KUBECTL --kubeconfig $KUBECONFIG_B get secrets -n apps
               (or: export KUBECONFIG=$KUBECONFIG_PATH PATH=$bin_dir:\$PATH, then kubectl as usual,
               with --kubeconfig $KUBECONFIG_B for workload-b)
  logs         .demo/mimeo.log (JSON), .demo/envtest.log, .demo/envtest-b.log
  stop         ./demo.sh down
EOF
}

scenario_registry_credentials() {
  step "Registry credentials next to a HelmRelease (examples/registry-credentials.yaml)"
  say "A SyncRule in platform-helm copies the Secret registry-creds into cluster-a as helm-registry;"
  say "cluster-a accepts it with the annotation mimeo.dev/accept-from: platform-helm."
  local started
  show apply -f examples/registry-credentials.yaml
  started="$(now_ms)"
  wait_for "the copy cluster-a/helm-registry" exists secret helm-registry -n cluster-a
  report_copy secret platform-helm registry-creds cluster-a helm-registry "$started"
  wait_rule platform-helm chart-registry-creds 1/1
  show get secret helm-registry -n cluster-a
  show get syncrules -A
}

scenario_fan_out() {
  step "Fan-out to a team's namespaces (examples/fan-out.yaml)"
  say "A SyncRule in platform-config copies the ConfigMap ca-bundle into every namespace labelled"
  say "team=payments: payments-api and payments-worker. marketing has no such label."
  local started ns
  show apply -f examples/fan-out.yaml
  started="$(now_ms)"
  for ns in payments-api payments-worker; do
    wait_for "the copy $ns/ca-bundle" exists configmap ca-bundle -n "$ns"
    report_copy configmap platform-config ca-bundle "$ns" ca-bundle "$started"
  done
  wait_rule platform-config payments-ca-bundle 2/2
  gone configmap ca-bundle -n marketing ||
    die "marketing is not labelled team=payments, yet it holds a copy of ca-bundle" "$STATE/mimeo.log"
  say "marketing (team=marketing): no copy, as it should be"
  show get configmaps -A -l mimeo.dev/managed-by=mimeo
}

scenario_rotation() {
  step "Rotating the registry credentials"
  say "The source Secret gets a new password; the copy follows. (Only hashes are shown, never values.)"
  local before new_hash started
  before="$(data_hash secret registry-creds platform-helm)"
  rotate_dockerconfig platform-helm registry-creds demo-robot
  started="$(now_ms)"
  new_hash="$(data_hash secret registry-creds platform-helm)"
  [[ "$new_hash" != "$before" ]] || die "patching the source Secret did not change its data"
  wait_for "cluster-a/helm-registry to follow the rotation" \
    same_data secret registry-creds platform-helm helm-registry cluster-a
  say "source platform-helm/registry-creds: data sha256 $before -> $new_hash"
  say "copy   cluster-a/helm-registry:      data sha256 $(data_hash secret helm-registry cluster-a), in sync within $(since "$started")"
}

# Whether the copy reports/db-user holds this token (compared here, never printed).
copy_token_is() { [[ "$(kc get secret db-user -n reports -o jsonpath='{.data.token}' | base64 -d)" == "$1" ]]; }

# The keys of a Secret, sorted, without their values.
secret_keys() { kc get secret "$2" -n "$1" -o go-template='{{range $k, $v := .data}}{{$k}} {{end}}'; }

scenario_plugin_chain() {
  step "A copy shaped by a chain of transform plugins"
  say "A Secret of a database user goes to the reports team through three first-party plugins:"
  say "filter-keys keeps username and password, rename-keys renames password to token, and"
  say "set-metadata labels the copy with where it came from."
  local manifest started
  kc create namespace reports -o name | indent
  kc annotate namespace reports mimeo.dev/accept-from=platform-helm -o name | indent
  kc create secret generic db-user -n platform-helm \
    --from-literal=username=reporter --from-literal=password=s3cret-1 \
    --from-literal=admin-password=never-copied --from-literal=host=db.internal -o name | indent
  manifest='apiVersion: mimeo.dev/v1alpha1
kind: SyncRule
metadata:
  name: reports-db-user
  namespace: platform-helm
spec:
  source: {kind: Secret, name: db-user}
  targets:
    - namespace: reports
  transforms:
    - plugin: file://filter-keys.wasm
      config: {include: [username, password]}
    - plugin: file://rename-keys.wasm
      config: {rename: {password: token}}
    - plugin: file://set-metadata.wasm
      config: {labels: {example.com/copied-from: "{{source.namespace}}.{{source.name}}"}}'
  say "\$ kubectl apply -f - <<EOF"
  say "$manifest" | indent
  say "EOF"
  kc apply -f - <<<"$manifest" 2>&1 | indent || die "applying the SyncRule reports-db-user failed"
  started="$(now_ms)"
  wait_for "the copy reports/db-user" exists secret db-user -n reports
  wait_rule platform-helm reports-db-user 1/1
  say "source platform-helm/db-user keys: $(secret_keys platform-helm db-user)"
  say "copy   reports/db-user keys:       $(secret_keys reports db-user)(in $(since "$started"))"
  say "copy's label example.com/copied-from=$(kc get secret db-user -n reports -o jsonpath='{.metadata.labels.example\.com/copied-from}')"
  local before
  before="$(data_hash secret db-user reports)"
  kc patch secret db-user -n platform-helm --type merge -p '{"stringData": {"password": "s3cret-2"}}' -o name | indent
  started="$(now_ms)"
  wait_for "reports/db-user to follow the rotation" copy_token_is s3cret-2
  say "the password rotated: the copy's token followed within $(since "$started") (data sha256 $before -> $(data_hash secret db-user reports))"
}

# The password in the Docker config of flux-apps/chart-registry.
pull_secret_password() {
  kc get secret chart-registry -n flux-apps -o jsonpath='{.data.\.dockerconfigjson}' | base64 -d |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["auths"]["registry.example.com"]["password"])'
}
pull_secret_password_is() { [[ "$(pull_secret_password 2>/dev/null)" == "$1" ]]; }

scenario_assembled_pull_secret() {
  step "A pull secret assembled from a Secret and a ConfigMap (examples/registry-from-parts.yaml)"
  say "A registry robot's username and password live in a Secret, the registry's host in a"
  say "ConfigMap. The rule names the ConfigMap as an input and declares the copy's type; the"
  say "template plugin writes the Docker config from both, into flux-apps next to a HelmRelease."
  local started before
  show apply -f examples/registry-from-parts.yaml
  started="$(now_ms)"
  wait_for "the copy flux-apps/chart-registry" exists secret chart-registry -n flux-apps
  wait_rule platform-registry chart-registry-pull 1/1
  say "copy flux-apps/chart-registry: type $(kc get secret chart-registry -n flux-apps -o jsonpath='{.type}'), keys $(secret_keys flux-apps chart-registry)(in $(since "$started"))"
  say "its Docker config names: $(kc get secret chart-registry -n flux-apps -o jsonpath='{.data.\.dockerconfigjson}' | base64 -d |
    python3 -c 'import json, sys; a = json.load(sys.stdin)["auths"]; print(", ".join("%s (user %s)" % (h, v["username"]) for h, v in a.items()))')"
  before="$(data_hash secret chart-registry flux-apps)"
  kc patch secret registry-robot -n platform-registry --type merge -p '{"stringData": {"password": "rotated-demo-password"}}' -o name | indent
  started="$(now_ms)"
  wait_for "flux-apps/chart-registry to follow the rotation" pull_secret_password_is rotated-demo-password
  say "the password rotated: the Docker config followed within $(since "$started") (data sha256 $before -> $(data_hash secret chart-registry flux-apps))"
}

scenario_new_namespace() {
  step "A new namespace of the payments team"
  say "payments-reports is created with the label team=payments and accepts platform-config."
  local started manifest
  manifest='apiVersion: v1
kind: Namespace
metadata:
  name: payments-reports
  labels:
    team: payments
  annotations:
    mimeo.dev/accept-from: platform-config'
  say "\$ kubectl apply -f - <<EOF"
  say "$manifest" | indent
  say "EOF"
  kc apply -f - <<<"$manifest" 2>&1 | indent || die "creating the namespace payments-reports failed"
  started="$(now_ms)"
  wait_for "the copy payments-reports/ca-bundle" exists configmap ca-bundle -n payments-reports
  report_copy configmap platform-config ca-bundle payments-reports ca-bundle "$started"
  wait_rule platform-config payments-ca-bundle 3/3
}

scenario_relabel() {
  step "A namespace leaves the team"
  say "payments-worker is relabelled team=other: the rule no longer selects it, so its copy goes."
  local started
  show label namespace payments-worker team=other --overwrite
  started="$(now_ms)"
  wait_for "the copy payments-worker/ca-bundle to be deleted" gone configmap ca-bundle -n payments-worker
  say "deleted payments-worker/ca-bundle within $(since "$started")"
  wait_rule platform-config payments-ca-bundle 2/2
  exists configmap ca-bundle -n payments-api ||
    die "payments-api lost its copy of ca-bundle when payments-worker was relabelled" "$STATE/mimeo.log"
  say "payments-api and payments-reports keep theirs"
}

scenario_remote_pull_secret() {
  step "An image pull secret in another cluster (examples/remote-pull-secret.yaml)"
  say "workload-b's kubeconfig goes into a Secret here; a RemoteCluster names it. A ClusterSyncRule"
  say "copies platform-images/image-pull-creds into the namespace apps of every RemoteCluster labelled"
  say "env=demo, creating apps there. A ClusterSyncRule needs no consent from the target namespace."
  local started version
  show create namespace mimeo-system
  show create secret generic workload-b-kubeconfig -n mimeo-system --from-file=value=.demo/cluster-b/kubeconfig
  show apply -f examples/remote-pull-secret.yaml
  started="$(now_ms)"
  poll remote_connected workload-b ||
    die "timed out after ${TIMEOUT} s waiting for RemoteCluster workload-b to be Ready (reason Connected); \
its status is: $(kc get remotecluster workload-b -o 'jsonpath={.status}' 2>&1)" "$STATE/mimeo.log"
  version="$(kc get remotecluster workload-b -o 'jsonpath={.status.serverVersion}')"
  say "RemoteCluster workload-b: Ready=True (reason Connected) within $(since "$started"), server version $version"
  wait_for "the copy workload-b:apps/image-pull-creds" kcb get secret image-pull-creds -n apps -o name
  report_copy_b secret platform-images image-pull-creds apps image-pull-creds "$started"
  wait_cluster_rule workload-image-pull-creds 1/1
  poll remote_counts_rules workload-b 1 ||
    die "timed out after ${TIMEOUT} s waiting for RemoteCluster workload-b to count 1 rule in status.rules" \
      "$STATE/mimeo.log"
  show get remoteclusters
  show get clustersyncrules
  show_b get namespace apps
  show_b -n apps get secret image-pull-creds
}

# Minimal stand-ins for openMCP's Cluster and AccessRequest CRDs (any object, with a status), for
# the demo only: a platform running openMCP has openMCP's own.
openmcp_standin_crds() {
  local kind plural
  for kind in Cluster AccessRequest; do
    plural="$(printf '%ss' "$kind" | tr '[:upper:]' '[:lower:]')"
    cat <<EOF
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: $plural.clusters.openmcp.cloud}
spec:
  group: clusters.openmcp.cloud
  scope: Namespaced
  names: {kind: $kind, plural: $plural, singular: $(printf '%s' "$kind" | tr '[:upper:]' '[:lower:]')}
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources: {status: {}}
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
EOF
  done
}

# Plays openMCP's cluster provider for AccessRequest test-0/NAME: a ServiceAccount in workload-b
# with a ClusterRole of exactly the requested rules, a kubeconfig Secret beside the request with
# a token of that ServiceAccount, and status Granted.
grant_access_request() {
  local name="$1" rules token kubeconfig="$STATE/openmcp-access.kubeconfig"
  rules="$(kc get accessrequest "$name" -n test-0 -o 'jsonpath={.spec.token.permissions[0].rules}')"
  [[ -n "$rules" ]] || die "AccessRequest test-0/$name asks for no rules"
  kcb create namespace openmcp-access >/dev/null 2>&1 || true
  kcb create serviceaccount mimeo -n openmcp-access >/dev/null 2>&1 || true
  kcb apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: openmcp-access-mimeo}
rules: $rules
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: openmcp-access-mimeo}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: openmcp-access-mimeo}
subjects: [{kind: ServiceAccount, name: mimeo, namespace: openmcp-access}]
EOF
  token="$(kcb create token mimeo -n openmcp-access --duration 24h)"
  cp "$KUBECONFIG_B" "$kubeconfig"
  "$KUBECTL" --kubeconfig "$kubeconfig" config set-credentials openmcp-access --token "$token" >/dev/null
  "$KUBECTL" --kubeconfig "$kubeconfig" config set-context --current --user openmcp-access >/dev/null
  kc create secret generic "$name-access" -n test-0 --from-file=kubeconfig="$kubeconfig" >/dev/null
  rm -f "$kubeconfig"
  kc patch accessrequest "$name" -n test-0 --subresource=status --type=merge \
    -p "{\"status\":{\"phase\":\"Granted\",\"secretRef\":{\"name\":\"$name-access\"}}}" >/dev/null
}

# Whether mimeo has made an AccessRequest in test-0 (an empty list is not an error to kubectl).
has_access_request() {
  [[ -n "$(kc get accessrequest -n test-0 -o name 2>/dev/null)" ]]
}

scenario_helmdeployer() {
  step "openMCP's HelmDeployer: next to every workload Cluster, and into each (examples/helmdeployer-*.yaml)"
  say "HelmDeployer copies Secrets by hand: registry credentials next to each selected openMCP Cluster"
  say "on the platform cluster, and an image pull secret into the HelmDeployment's namespace (helm) on"
  say "each selected cluster itself; it never deletes them. Here mimeo does both, for an openMCP"
  say "Cluster that stands for workload-b. The demo plays openMCP's cluster provider: it answers"
  say "mimeo's AccessRequest with a ServiceAccount in workload-b holding exactly the rules asked for."
  local started request
  openmcp_standin_crds | kc apply -f - >/dev/null || die "installing the openMCP stand-in CRDs failed"
  kc wait --for condition=established --timeout "${TIMEOUT}s" \
    crd/clusters.clusters.openmcp.cloud crd/accessrequests.clusters.openmcp.cloud >/dev/null ||
    die "the openMCP stand-in CRDs were not established"
  show create namespace test-0
  kc apply -f - >/dev/null <<'EOF' || die "creating the openMCP Cluster failed"
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: Cluster
metadata: {name: workload-b, namespace: test-0}
spec: {profile: demo, tenancy: Shared, purposes: [workload]}
EOF
  say "An openMCP Cluster test-0/workload-b with purpose workload."
  show apply -f examples/helmdeployer-registry-credentials.yaml
  started="$(now_ms)"
  wait_for "the registry credentials next to the Cluster (test-0/chart-registry)" \
    kc get secret chart-registry -n test-0 -o name
  say "test-0/chart-registry is there $(since "$started") after the rule, next to the Cluster."
  show apply -f examples/helmdeployer-pull-secret.yaml
  started="$(now_ms)"
  wait_for "mimeo's AccessRequest for the Cluster" has_access_request
  request="$(kc get accessrequest -n test-0 -o 'jsonpath={.items[0].metadata.name}')"
  say "mimeo asked for access with AccessRequest test-0/$request $(since "$started") after the rule, for:"
  kc get accessrequest "$request" -n test-0 \
    -o 'jsonpath={range .spec.token.permissions[0].rules[*]}{.resources}: {.verbs}{"\n"}{end}' | indent
  grant_access_request "$request"
  say "The demo's provider granted it; the copy follows:"
  wait_for "the pull secret in helm on workload-b" kcb get secret image-pull -n helm -o name
  say "workload-b:helm/image-pull is there $(since "$started") after the rule."
  wait_cluster_rule helmdeployer-image-pull 1/1
  show get clusterinventory workload
  show get remoteclusters -l mimeo.dev/inventory=workload
  show_b -n helm get secret image-pull
}

scenario_remote_rotation() {
  step "Rotating the image pull credentials: the copy in workload-b follows"
  say "The source Secret in platform-images gets a new password. (Only hashes are shown, never values.)"
  local before new_hash started
  before="$(data_hash secret image-pull-creds platform-images)"
  rotate_dockerconfig platform-images image-pull-creds demo-puller
  started="$(now_ms)"
  new_hash="$(data_hash secret image-pull-creds platform-images)"
  [[ "$new_hash" != "$before" ]] || die "patching the source Secret did not change its data"
  wait_for "workload-b:apps/image-pull-creds to follow the rotation" \
    same_data_b secret image-pull-creds platform-images image-pull-creds apps
  say "source platform-images/image-pull-creds:  data sha256 $before -> $new_hash"
  say "copy   workload-b:apps/image-pull-creds:  data sha256 $(data_hash_b secret image-pull-creds apps), in sync within $(since "$started")"
  wait_cluster_rule workload-image-pull-creds 1/1
  say "The rule's status counts its copies in each cluster and names any that are not in sync;"
  say "mimeo status draws it as a tree, with the copies it can list in this cluster:"
  say "\$ mimeo status clustersyncrule/workload-image-pull-creds"
  KUBECONFIG="$KUBECONFIG_PATH" "$MIMEO" status clustersyncrule/workload-image-pull-creds --color never | indent ||
    die "mimeo status clustersyncrule/workload-image-pull-creds failed"
}

# --- down -----------------------------------------------------------------------------------

down() {
  local quiet="${1:-}" stopped
  need_envtest
  stopped="$(stop_all)" || die "stopping the demo failed${stopped:+; it said: $stopped}"
  [[ -z "$stopped" ]] || say "$stopped"
  if [[ -e "$STATE" ]]; then
    rm -rf "$STATE"
    [[ -n "$quiet" ]] || say "removed .demo/"
  fi
  [[ -n "$stopped$quiet" ]] || say "no demo was running"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
esac
