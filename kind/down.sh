#!/usr/bin/env bash
# `make kind-down`: deletes the kind cluster, puts back the host sysctls its kubelet changed, and
# stops the Docker daemon kind/up.sh started (a daemon that was already running is left alone).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
if docker_answers; then
  kind_bin=$(kind/host/tool.sh kind)
  "$kind_bin" delete cluster --name "$CLUSTER_NAME"
fi
kind/host/sysctls.sh restore
kind/host/dockerd.sh stop
rm -f "$REPO_ROOT/.cache/kind.kubeconfig" "$STATE_DIR/orchestrator-image"
