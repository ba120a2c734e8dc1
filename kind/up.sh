#!/usr/bin/env bash
# Creates the kind cluster (if needed), builds and loads the image, deploys the orchestrator and
# waits until it answers. Writes the cluster's kubeconfig to .cache/kind.kubeconfig.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${KIND_CLUSTER:-di-orchestrator}
image=opendilab/di-orchestrator:dev
for tool in kind docker kubectl; do
  command -v "$tool" >/dev/null || { echo "kind/up.sh needs $tool on the PATH" >&2; exit 1; }
done
if ! kind get clusters | grep -qx "$cluster"; then
  kind create cluster --name "$cluster" --config kind/cluster.yaml --wait 120s
fi
mkdir -p .cache
kind get kubeconfig --name "$cluster" > .cache/kind.kubeconfig
export KUBECONFIG=$PWD/.cache/kind.kubeconfig
docker build -t "$image" .
kind load docker-image "$image" --name "$cluster"
# The suite's replicas run this image; load it so pods start without a registry.
docker pull busybox:1.36 >/dev/null && kind load docker-image busybox:1.36 --name "$cluster"
kubectl apply --server-side -k kind/overlay
kubectl -n di-system rollout status deployment/di-orchestrator --timeout=180s
echo "deployed; KUBECONFIG=$KUBECONFIG"
