#!/usr/bin/env bash
# Builds the kind node image offline: no registry is asked for anything. Prints its name.
#
#   kind/node/build.sh RELEASE_DIR
#
# RELEASE_DIR holds the Kubernetes binaries (`di-controlplane release` builds them). The node
# image is kind's layout (kind creates clusters from it as from its own) made from parts built
# here: a Debian root filesystem by debootstrap, the control plane's images FROM scratch around
# the static binaries, CoreDNS from its Go module, our own pause. Every step is skipped when its
# output exists; the node image's tag is a hash of everything that goes into it.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
release=${1:?usage: build.sh RELEASE_DIR}
ETCD_TAG=3.7.0-0          # kubeadm's etcd image tag; hack/controlplane pins etcd v3.7.0
PAUSE_TAG=3.10.2          # kubeadm's pause; kind/node/files/etc/containerd/config.toml names it
DEBIAN_SUITE=bookworm
# The node's packages: systemd as PID 1, containerd and runc (Debian's), the CNI plugins the
# node's bridge network uses, and what kubelet, kube-proxy and kind's scripts call.
PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,iptables,nftables,iproute2,ethtool,socat,conntrack,util-linux,mount,kmod,ca-certificates,procps,libseccomp2,pigz,jq,bash

work=$CACHE_ROOT/kind/build
mkdir -p "$work"
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
hash_of() { sha256sum | cut -c1-12; }

# 1. Root filesystem and base image.
rootfs_key=$(echo "$DEBIAN_SUITE $PACKAGES" | hash_of)
rootfs_image=di-kind/rootfs:$rootfs_key
if ! image_exists "$rootfs_image"; then
  rootfs=$work/rootfs-$rootfs_key
  if [[ ! -f $rootfs/.complete ]]; then
    say "debootstrap $DEBIAN_SUITE into $rootfs (about 2 minutes)"
    rm -rf "$rootfs"
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    debootstrap --variant=minbase --include="$PACKAGES" "$DEBIAN_SUITE" "$rootfs" "${mirror:-http://deb.debian.org/debian}" \
      >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    touch "$rootfs/.complete"
  fi
  say "importing the root filesystem as $rootfs_image"
  tar -C "$rootfs" --exclude=./.complete -c . | docker import - "$rootfs_image" >/dev/null
fi
base_key=$( (echo "$rootfs_key"; cd "$REPO_ROOT/kind" && find node/Dockerfile node/files host/runc-drop-sys-resource -type f | sort | xargs cat) | hash_of)
base_image=di-kind/base:$base_key
if ! image_exists "$base_image"; then
  say "building $base_image"
  docker_build -f "$REPO_ROOT/kind/node/Dockerfile" --build-arg ROOTFS="$rootfs_image" -t "$base_image" "$REPO_ROOT/kind"
fi

# 2. Binaries that are not Kubernetes': CoreDNS and pause.
coredns=$("$REPO_ROOT/kind/host/tool.sh" coredns)
tools=$work/tools
mkdir -p "$tools"
pause_key=$(cat "$REPO_ROOT"/kind/images/pause/* | hash_of)
if [[ ! -x $tools/pause-$pause_key ]]; then
  (cd "$REPO_ROOT/kind/images/pause" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tools/pause-$pause_key" .)
fi

# 3. The images the node's containerd starts the control plane and add-ons from. Each is one
# static binary in an empty image, but kube-proxy, which calls iptables.
images=$work/images-$KUBERNETES_VERSION-$rootfs_key
mkdir -p "$images"
component_image() { # component_image NAME REF BINARY [FROM]
  local name=$1 ref=$2 binary=$3 from=${4:-scratch} ctx
  [[ -f $images/$name.tar ]] && return
  ctx=$(mktemp -d "$work/ctx.XXXX")
  cp "$binary" "$ctx/$name"
  printf 'FROM %s\nCOPY %s /usr/local/bin/%s\nENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin\nENTRYPOINT ["/usr/local/bin/%s"]\n' \
    "$from" "$name" "$name" "$name" >"$ctx/Dockerfile"
  docker_build -t "$ref" "$ctx"
  docker save -o "$images/$name.tar.partial" "$ref"
  mv "$images/$name.tar.partial" "$images/$name.tar"
  rm -rf "$ctx"
}
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  component_image "$c" "registry.k8s.io/$c:$KUBERNETES_VERSION" "$release/$c"
done
component_image kube-proxy "registry.k8s.io/kube-proxy:$KUBERNETES_VERSION" "$release/kube-proxy" "$rootfs_image"
component_image etcd "registry.k8s.io/etcd:$ETCD_TAG" "$release/etcd"
component_image coredns "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$coredns"
component_image pause "registry.k8s.io/pause:$PAUSE_TAG" "$tools/pause-$pause_key"

# 4. The node: the base with the binaries in /usr/bin and the images in containerd's store (kind's
# own layout: /kind/version, images imported unpacked later by the CRI).
node_key=$( (echo "$base_key $KUBERNETES_VERSION $COREDNS_VERSION $ETCD_TAG $pause_key"; sha256sum "$release"/kube* "$release"/etcd) | hash_of)
node_image=di-kind/node:$KUBERNETES_VERSION-$node_key
if ! image_exists "$node_image"; then
  say "assembling $node_image"
  # --init: containerd, started and stopped below, must be reaped, not left a zombie of `sleep`.
  cid=$(docker run -d --init --entrypoint sleep "$base_image" infinity)
  trap 'docker rm -f "$cid" >/dev/null 2>&1 || true' EXIT
  for b in kubeadm kubelet kubectl; do docker cp "$release/$b" "$cid:/usr/bin/$b"; done
  echo "$KUBERNETES_VERSION" | docker exec -i "$cid" sh -c 'cat >/kind/version'
  docker exec "$cid" sh -c 'containerd >/tmp/containerd.log 2>&1 &'
  docker exec "$cid" sh -c 'for i in $(seq 100); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.1; done; cat /tmp/containerd.log; exit 1'
  for tar in "$images"/*.tar; do
    docker exec -i "$cid" ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests - <"$tar" >/dev/null
  done
  docker exec "$cid" sh -c 'pkill containerd; while pgrep containerd >/dev/null; do sleep 0.1; done; rm -f /tmp/containerd.log'
  docker commit -c 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' -c 'CMD []' "$cid" "$node_image" >/dev/null
  docker rm -f "$cid" >/dev/null
  trap - EXIT
fi
# Earlier builds' images only take disk.
find "$work" -maxdepth 1 -name 'images-*' ! -path "$images" -exec rm -rf {} +
for stale in $(docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^di-kind/(node|base):' | grep -vxF -e "$node_image" -e "$base_image"); do
  docker rmi "$stale" >/dev/null 2>&1 || true
done
echo "$node_image"
