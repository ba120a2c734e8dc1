#!/usr/bin/env bash
# `make kind`: from nothing to the orchestrator deployed on a kind cluster, idempotently. Starts
# a Docker daemon when none answers, builds kind (and, where no registry is reachable, the node
# image) from pinned sources into the cache, creates the cluster, builds and loads the images,
# deploys Kueue (kind/kueue/deploy.sh) and then the orchestrator with `kubectl apply -k`, and
# waits until both webhooks answer. Writes the cluster's kubeconfig to .cache/kind.kubeconfig.
# kind/down.sh undoes all of it.
#
# KIND_NODE_IMAGE=<image> uses that node image; KIND_OFFLINE=1 (or a failed pull of kind's
# public image) builds one here; KIND_FRESH=1 deletes a cluster already here first.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
mkdir -p "$STATE_DIR"
start=$SECONDS

command -v docker >/dev/null && command -v dockerd >/dev/null || { need_root "installing Docker"; kind/host/packages.sh; }
kind/host/dockerd.sh start
kind_bin=$(kind/host/tool.sh kind)

# The Kubernetes binaries of the release, with their real version (kubectl among them).
cargo build --quiet -p di-e2e --bin di-controlplane -p di-orchestrator --bin di-orchestrator
target_dir=${CARGO_TARGET_DIR:-target}
release=$("$target_dir"/debug/di-controlplane release)
kubectl=$release/kubectl

node_image=${KIND_NODE_IMAGE:-}
config=kind/cluster.yaml
if [[ -z $node_image ]]; then
  public=kindest/node:$KUBERNETES_VERSION
  if [[ ${KIND_OFFLINE:-} != 1 ]] && { docker image inspect "$public" >/dev/null 2>&1 || timeout 120 docker pull -q "$public" >/dev/null 2>&1; }; then
    node_image=$public
  else
    say "kind's public node image cannot be had here: building one offline"
    node_image=$(kind/node/build.sh "$release")
  fi
fi
# Our offline node image brings its own network, not kindnet.
[[ $node_image == di-kind/* ]] && config=kind/cluster-offline.yaml

# A cluster already here is kept when its API server answers, unless KIND_FRESH=1 (the kind tier):
# one a killed run left behind, its nodes restarted with the Docker daemon, may never answer.
if "$kind_bin" get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  stale=""
  if [[ ${KIND_FRESH:-} == 1 ]]; then
    stale="a fresh one was asked for"
  elif ! api_answers "$kubectl" <("$kind_bin" get kubeconfig --name "$CLUSTER_NAME" 2>/dev/null); then
    stale="its API server did not answer within a minute"
  fi
  if [[ -n $stale ]]; then
    say "cluster $CLUSTER_NAME is here already and $stale: deleting it"
    delete_cluster "$kind_bin" || die "cluster $CLUSTER_NAME could not be deleted"
  fi
fi
if ! "$kind_bin" get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  kind/host/sysctls.sh save
  say "creating cluster $CLUSTER_NAME from $node_image"
  "$kind_bin" create cluster --name "$CLUSTER_NAME" --image "$node_image" --config "$config" --wait 120s
fi
"$kind_bin" get kubeconfig --name "$CLUSTER_NAME" >"$REPO_ROOT/.cache/kind.kubeconfig"
export KUBECONFIG=$REPO_ROOT/.cache/kind.kubeconfig
[[ $config == kind/cluster-offline.yaml ]] && kind/pod-network/setup.sh "$kubectl" "$kind_bin"

orchestrator_image=$(kind/images/build.sh orchestrator "$target_dir"/debug/di-orchestrator)
for image in "$orchestrator_image" $(kind/images/build.sh busybox); do
  "$kind_bin" load docker-image "$image" --name "$CLUSTER_NAME" >/dev/null
done
# Kueue before the orchestrator, which looks for it only when it starts (--queues=auto).
kueue_start=$SECONDS
kueue=$(kind/kueue/deploy.sh "$kubectl" "$kind_bin")
say "Kueue $KUEUE_VERSION deployed in $((SECONDS - kueue_start)) s"
deployed=$("$kubectl" -n di-system get deployment di-orchestrator -o name 2>/dev/null || true)
"$kubectl" apply --server-side --force-conflicts -k kind/overlay >/dev/null
# A new build under the same tag: pods already running the old one must restart to run it; so
# must those that started before Kueue was there.
image_id=$(docker image inspect -f '{{.Id}}' "$orchestrator_image")
if [[ -n $deployed && ($(cat "$STATE_DIR/orchestrator-image" 2>/dev/null) != "$image_id" || $kueue == installed) ]]; then
  "$kubectl" -n di-system rollout restart deployment/di-orchestrator >/dev/null
fi
echo "$image_id" >"$STATE_DIR/orchestrator-image"
"$kubectl" -n di-system rollout status deployment/di-orchestrator --timeout=180s
probe='{"apiVersion":"diengine.opendilab.org/v1alpha1","kind":"DIJob","metadata":{"name":"di-webhook-probe","namespace":"di-system"},"spec":{"coordinator":{"template":{"spec":{"containers":[{"name":"di-container","image":"probe"}]}}}}}'
until_webhook_settled "$kubectl" "the orchestrator" "$probe"
say "deployed in $((SECONDS - start)) s; KUBECONFIG=$KUBECONFIG"
