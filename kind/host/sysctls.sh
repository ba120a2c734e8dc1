#!/usr/bin/env bash
# A kind node is a privileged container: its kubelet and kube-proxy set kernel parameters that are
# the host's too. `save` records them before the first cluster is created; `restore` puts them
# back at teardown.
#
#   kind/host/sysctls.sh save|restore
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
saved=$STATE_DIR/sysctls
# What the kubelet sets (its kernel defaults), kube-proxy (conntrack, localnet routing, bridge
# netfilter) and the node image's sysctl.d.
KEYS=(
  kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  vm.overcommit_memory vm.panic_on_oom
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait net.ipv4.conf.all.route_localnet
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.ipv4.ip_forward
)
case ${1:-} in
  save)
    # The first save wins: a second cluster must not record the first one's changes as the host's.
    [[ -f $saved ]] && exit 0
    mkdir -p "$STATE_DIR"
    for key in "${KEYS[@]}"; do
      value=$(sysctl -n "$key" 2>/dev/null) && printf '%s=%s\n' "$key" "$value"
    done >"$saved.partial"
    mv "$saved.partial" "$saved"
    ;;
  restore)
    [[ -f $saved ]] || exit 0
    changed=0
    while IFS='=' read -r key value; do
      [[ $(sysctl -n "$key" 2>/dev/null) == "$value" ]] && continue
      sysctl -q -w "$key=$value" >/dev/null 2>&1 && changed=$((changed + 1)) || say "could not restore $key=$value"
    done <"$saved"
    say "restored $changed host sysctl(s) the cluster had changed"
    rm -f "$saved"
    ;;
  *) die "usage: sysctls.sh save|restore" ;;
esac
