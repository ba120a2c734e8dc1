#!/usr/bin/env bash
# Deploys Kueue $KUEUE_VERSION on the kind cluster KUBECONFIG names, idempotently, from its Go
# module's own manifests (config/default, with kind/kueue/kustomization.yaml over them) and an
# image built here around its manager; returns once its CRDs are established and its webhooks
# answer. Prints "installed" when Kueue was not there before (the orchestrator looks for Kueue
# only when it starts).
#
#   kind/kueue/deploy.sh KUBECTL KIND
#
# The manager is built as the control-plane tier builds it (tests/e2e/src/kueue.rs), at the same
# path in the cache, so either tier's first run serves both: statically, inside a copy of Kueue's
# own module, whose go.sum covers every dependency.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kubectl=${1:?usage: deploy.sh KUBECTL KIND}
kind_bin=${2:?usage: deploy.sh KUBECTL KIND}
cd "$REPO_ROOT"
MODULE=sigs.k8s.io/kueue

# Kueue's module in Go's module cache, downloaded if it is not there yet.
module_dir() {
  (cd /tmp && go mod download "$MODULE@$KUEUE_VERSION") >&2
  echo "$(go env GOMODCACHE)/$MODULE@$KUEUE_VERSION"
}

# The manager binary, built on first use: under the lock the control-plane tier takes for it (the
# cache folder's .lock), as the two tiers may ask for it at once (kind/tier.sh).
manager() {
  local cache=$CACHE_ROOT/kueue/$KUEUE_VERSION lock
  mkdir -p "$cache"
  exec {lock}>"$cache/.lock"
  flock "$lock"
  if [[ ! -x $cache/kueue ]]; then
    say "building Kueue $KUEUE_VERSION from its Go module (first run only; a few minutes)"
    # The module cache is read-only: build in a copy, and rename, so an interrupted build never
    # leaves half a binary.
    rm -rf "$cache/.source"
    cp -R "$1" "$cache/.source"
    chmod -R u+w "$cache/.source"
    (cd "$cache/.source" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$cache/.kueue.partial" ./cmd/kueue) >&2
    mv "$cache/.kueue.partial" "$cache/kueue"
    rm -rf "$cache/.source"
  fi
  exec {lock}>&-
  echo "$cache/kueue"
}

# Kueue's manifests with our overlay, rendered by kubectl's kustomize. The overlay names the
# module's config as ../config: both are copied into a scratch folder.
render() { # render MODULE IMAGE
  local dir
  dir=$(mktemp -d)
  cp -R "$1/config" "$dir/config"
  chmod -R u+w "$dir/config"
  cp -R kind/kueue "$dir/overlay"
  printf -- '- op: replace\n  path: /spec/template/spec/containers/0/image\n  value: %s\n' "$2" >"$dir/overlay/image.yaml"
  # Loaded into the node by kind: a pull would ask a registry.
  printf -- '- op: replace\n  path: /spec/template/spec/containers/0/imagePullPolicy\n  value: Never\n' >>"$dir/overlay/image.yaml"
  "$kubectl" kustomize "$dir/overlay"
  rm -rf "$dir"
}

command -v go >/dev/null || die "Kueue is built from its Go module, and there is no go on the PATH"
module=$(module_dir)
image=$(kind/images/build.sh kueue "$(manager "$module")")
"$kind_bin" load docker-image "$image" --name "$CLUSTER_NAME" >/dev/null
manifests=$(render "$module" "$image")

before=$("$kubectl" -n kueue-system get deployment kueue-controller-manager -o name 2>/dev/null || true)
# Server-side: Kueue's CRDs are too large for the annotation a client-side apply keeps.
echo "$manifests" | "$kubectl" apply --server-side --force-conflicts -f - >/dev/null
# What the guide's Queues and quotas tells a cluster admin to apply beside Kueue: its reading of DIJobs.
"$kubectl" apply --server-side --force-conflicts -f manifests/kueue/dijob-reader.yaml >/dev/null
# A new image under the same tag, or a new configuration (read only at start): restart it.
applied="$(docker image inspect -f '{{.Id}}' "$image") $(echo "$manifests" | sha256sum | cut -d' ' -f1)"
if [[ -n $before && $(cat "$STATE_DIR/kueue-applied" 2>/dev/null) != "$applied" ]]; then
  "$kubectl" -n kueue-system rollout restart deployment/kueue-controller-manager >/dev/null
fi
echo "$applied" >"$STATE_DIR/kueue-applied"
"$kubectl" wait --for=condition=Established --timeout=60s crd -l app.kubernetes.io/name=kueue >/dev/null
"$kubectl" -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s >&2
# Its own certificates reach its webhooks' configurations and then its pod's mounted Secret (at the
# kubelet's next sync of the pod): until both have, the API server cannot call it.
probe='{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ResourceFlavor","metadata":{"name":"di-webhook-probe"}}'
until_webhook_settled "$kubectl" "Kueue" "$probe"
[[ -n $before ]] || echo installed
