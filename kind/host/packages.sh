#!/usr/bin/env bash
# Installs, with apt-get, the Debian packages the kind tier needs on the host and that are missing.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
# dockerd and its runtime; debootstrap for the node's root filesystem; jq for the runc wrapper.
# (The suite's busybox image comes from the busybox package, downloaded, not installed.)
packages=(docker.io containerd runc iptables debootstrap jq)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
need_root "installing ${missing[*]}"
say "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
