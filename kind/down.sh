#!/usr/bin/env bash
# `make kind-down`: deletes the kind cluster, puts back the host sysctls its kubelet changed, and
# stops the Docker daemon kind/up.sh started (a daemon that was already running is left alone).
# The sysctls and the daemon are seen to even when the cluster's deletion fails.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

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

deleted=true
if docker_answers; then
  kind_bin=$(kind/host/tool.sh kind)
  deleted=false
  for pause in 3 10 20 -; do
    if "$kind_bin" delete cluster --name "$CLUSTER_NAME"; then
      deleted=true
      break
    fi
    [[ $pause == - ]] && break
    thaw_nodes
    say "deleting cluster $CLUSTER_NAME failed; asking again in $pause s"
    sleep "$pause"
  done
fi
kind/host/sysctls.sh restore
kind/host/dockerd.sh stop
rm -f "$REPO_ROOT/.cache/kind.kubeconfig" "$STATE_DIR/orchestrator-image" "$STATE_DIR/kueue-applied"
if [[ $deleted != true ]]; then
  echo "kind/down.sh: cluster $CLUSTER_NAME could not be deleted (see Docker's answer above)" >&2
  exit 1
fi
