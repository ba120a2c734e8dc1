#!/usr/bin/env bash
# `make kind-down`: deletes the kind cluster, puts back the host sysctls its kubelet changed, and
# stops the Docker daemon kind/up.sh started (a daemon that was already running is left alone).
# The sysctls and the daemon are seen to even when the cluster's deletion fails.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
deleted=true
if docker_answers; then
  kind_bin=$(kind/host/tool.sh kind)
  # Under load Docker can miss a node container's exit event and refuse its removal ("did not
  # receive an exit event"); asked again a few seconds later, it removes it.
  deleted=false
  for pause in 3 10 20 -; do
    if "$kind_bin" delete cluster --name "$CLUSTER_NAME"; then
      deleted=true
      break
    fi
    [[ $pause == - ]] && break
    say "deleting cluster $CLUSTER_NAME failed; asking again in $pause s"
    sleep "$pause"
  done
fi
kind/host/sysctls.sh restore
kind/host/dockerd.sh stop
rm -f "$REPO_ROOT/.cache/kind.kubeconfig" "$STATE_DIR/orchestrator-image"
if [[ $deleted != true ]]; then
  echo "kind/down.sh: cluster $CLUSTER_NAME could not be deleted (see Docker's answer above)" >&2
  exit 1
fi
