# Shared by the kind tier's scripts: versions, the cache, logging. Sourced, never run.
# shellcheck shell=bash

# The releases the kind tier builds. KUBERNETES_VERSION matches the control-plane tier
# (tests/e2e/src/binaries.rs and hack/controlplane/go.mod); a test keeps them in step.
KIND_VERSION=v0.33.0
KUBERNETES_VERSION=v1.37.2
HELM_VERSION=v3.21.4
COREDNS_VERSION=v1.14.6   # what kubeadm $KUBERNETES_VERSION deploys
KUEUE_VERSION=v0.19.2     # as tests/e2e/src/kueue.rs builds it; a test keeps them in step
# The release the upgrade scenario installs first and upgrades from (kind/previous.sh): main
# before spec.managedBy, so its CRDs, RBAC and Deployment all change in the upgrade.
PREVIOUS_RELEASE=3719bf44bd33e9e4854f6a7dd6bd857b7751749a

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER_NAME=${KIND_CLUSTER:-di-orchestrator}
# Outside the clone, so a fresh clone on this machine (CI's among them) skips every build it can.
CACHE_ROOT=${DI_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/di-orchestrator}
# Where the scripts keep state of a running cluster: the kubeconfig, what to undo at teardown.
STATE_DIR=$REPO_ROOT/.cache/kind

say() { printf '[kind] %s\n' "$*" >&2; }
die() { printf '[kind] error: %s\n' "$*" >&2; exit 1; }

need_root() {
  [[ $(id -u) == 0 ]] || die "$1 needs root (it installs packages and starts dockerd); run it with sudo, or start Docker yourself"
}

docker_answers() { docker info >/dev/null 2>&1; }

# `docker build`, quiet unless it fails (the legacy builder's deprecation notice included).
docker_build() {
  local out
  out=$(docker build "$@" 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
}

# Waits until a webhook answers steadily: ready pods are not yet a webhook that answers, as their
# addresses reach kube-proxy's rules a moment later. Done when a dry-run create of PROBE (JSON)
# passes the webhook 12 times in a row, 0.25 s apart: the rule of
# di_client::wait::until_webhook_settled (kubectl di install and the e2e suite), in shell here
# because these scripts deploy with kubectl.
until_webhook_settled() { # until_webhook_settled KUBECTL WHAT PROBE
  local answered=0
  for _ in $(seq 480); do
    if echo "$3" | "$1" create --dry-run=server -f - >/dev/null 2>&1; then
      answered=$((answered + 1))
      ((answered >= 12)) && return 0
    else
      answered=0
    fi
    sleep 0.25
  done
  die "$2's webhook did not answer steadily within 2 minutes"
}

# True once the API server of KUBECONFIG (a file) says it is ready, within a minute.
api_answers() { # api_answers KUBECTL KUBECONFIG
  local config
  config=$(cat "$2") && [[ -n $config ]] || return 1
  for _ in $(seq 30); do
    "$1" --kubeconfig <(printf '%s\n' "$config") --request-timeout=5s get --raw /readyz >/dev/null 2>&1 && return 0
    sleep 2
  done
  return 1
}

# A node's teardown cut short can leave one of its cgroups frozen (cgroup v1's freezer, set by
# runc while it starts or stops a container in the node), with a process in it that never ends:
# Docker then never sees the node exit and refuses to remove it ("did not receive an exit
# event"). Thawed, the process ends, and the node with it.
thaw_nodes() {
  local id state
  for id in $(docker ps -aq --no-trunc --filter "label=io.x-k8s.kind.cluster=$CLUSTER_NAME"); do
    [[ -d /sys/fs/cgroup/freezer/docker/$id ]] || continue
    while read -r state; do
      if [[ $(cat "$state") == FROZEN ]] && echo THAWED >"$state"; then
        say "thawed ${state#/sys/fs/cgroup/freezer/}"
      fi
    done < <(find "/sys/fs/cgroup/freezer/docker/$id" -name freezer.state)
  done
}

# Deletes the kind cluster (absent is fine), thawing its nodes between tries.
delete_cluster() { # delete_cluster KIND
  local pause
  for pause in 3 10 20 -; do
    "$1" delete cluster --name "$CLUSTER_NAME" && return 0
    [[ $pause == - ]] && return 1
    thaw_nodes
    say "deleting cluster $CLUSTER_NAME failed; asking again in $pause s"
    sleep "$pause"
  done
}
