#!/usr/bin/env bash
# `make kind-down`: deletes the kind cluster, puts back the host sysctls its kubelet changed, and
# stops the Docker daemon kind/up.sh started (a daemon that was already running is left alone).
# The sysctls and the daemon are seen to even when the cluster's deletion fails.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

deleted=true
if docker_answers; then
  delete_cluster "$(kind/host/tool.sh kind)" || deleted=false
fi
kind/host/sysctls.sh restore
kind/host/dockerd.sh stop
rm -f "$REPO_ROOT/.cache/kind.kubeconfig" "$STATE_DIR/orchestrator-image" "$STATE_DIR/kueue-applied"
if [[ $deleted != true ]]; then
  echo "kind/down.sh: cluster $CLUSTER_NAME could not be deleted (see Docker's answer above)" >&2
  exit 1
fi
