#!/usr/bin/env bash
# Gives every node of an offline kind cluster (one made from kind/node/build.sh's image) the
# credentials its pod network reads the other nodes with (kind/node/files/kind/bin/pod-network),
# then waits until every node is Ready, routes to the others and has the Service network.
# Idempotent; kind/up.sh runs it.
#
#   kind/pod-network/setup.sh KUBECTL KIND
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
kubectl=${1:?usage: setup.sh KUBECTL KIND}
kind_bin=${2:?usage: setup.sh KUBECTL KIND}

"$kubectl" apply --server-side -f "$REPO_ROOT/kind/pod-network/rbac.yaml" >/dev/null
token=""
for _ in $(seq 120); do
  token=$("$kubectl" -n kube-system get secret di-pod-network -o jsonpath='{.data.token}' 2>/dev/null | base64 -d || true)
  [[ -n $token ]] && break
  sleep 0.5
done
[[ -n $token ]] || die "the token of kube-system/di-pod-network was not written within a minute"
ca=$("$kubectl" -n kube-system get secret di-pod-network -o jsonpath='{.data.ca\.crt}')
# The API server as the nodes reach it, on the Docker network.
server=$("$kind_bin" get kubeconfig --internal --name "$CLUSTER_NAME" | awk '/server:/ {print $2; exit}')
kubeconfig=$(cat <<YAML
apiVersion: v1
kind: Config
clusters:
- name: kind
  cluster: {server: $server, certificate-authority-data: $ca}
users:
- name: di-pod-network
  user: {token: $token}
contexts:
- name: di-pod-network
  context: {cluster: kind, user: di-pod-network}
current-context: di-pod-network
YAML
)
nodes=$("$kind_bin" get nodes --name "$CLUSTER_NAME")
for node in $nodes; do
  printf '%s\n' "$kubeconfig" | docker exec -i "$node" sh -c 'umask 077 && cat >/kind/pod-network.kubeconfig.tmp && mv /kind/pod-network.kubeconfig.tmp /kind/pod-network.kubeconfig'
done
"$kubectl" wait --for=condition=Ready nodes --all --timeout=180s >/dev/null

# kube-proxy runs on each node's own network and finds the API server by the name kind gives it,
# the control-plane node's, which only Docker's resolver knows: pods on the host's network ask
# /kind/resolv.conf, which answers nothing (see the entrypoint). The control-plane node resolves
# its own name from /etc/hosts; the workers' kube-proxy is given its address instead (one the API
# server's certificate names).
control_plane=$("$kubectl" get nodes -l node-role.kubernetes.io/control-plane -o jsonpath='{.items[0].metadata.name} {.items[0].status.addresses[?(@.type=="InternalIP")].address}')
read -r _ address <<<"$control_plane"
proxy=$("$kubectl" -n kube-system get configmap kube-proxy -o json)
# Whatever host it names (kind's name, or an address an earlier run wrote), the current address.
wanted=$(jq --arg to "https://$address:" '.data["kubeconfig.conf"] |= sub("https://[^:/]+:"; $to)' <<<"$proxy")
if [[ $wanted != "$proxy" ]]; then
  "$kubectl" replace -f - <<<"$wanted" >/dev/null
  "$kubectl" -n kube-system rollout restart daemonset kube-proxy >/dev/null
fi
"$kubectl" -n kube-system rollout status daemonset kube-proxy --timeout=120s >/dev/null
# Ready is the node's own bridge; the routes to the others follow within the script's period.
count=$(wc -w <<<"$nodes")
for node in $nodes; do
  for _ in $(seq 120); do
    routes=$(docker exec "$node" ip -4 route show root 10.244.0.0/16 | grep -c ' via ' || true)
    # And kube-proxy, which finds the API server by the control-plane node's name, has the
    # Service network: until then a pod asking for the API server's Service reaches nothing.
    if ((routes >= count - 1)) && docker exec "$node" iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- '-d 10.96.0.1/32'; then
      continue 2
    fi
    sleep 0.5
  done
  die "$node has $routes routes to the other nodes' pods (of $((count - 1))) or kube-proxy has no rule for the API server's Service"
done
say "pod network: $count nodes, each routing to the others' pods"
