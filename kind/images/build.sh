#!/usr/bin/env bash
# Builds, without pulling a base image, the images the kind tier loads into its nodes; prints the
# image's name.
#
#   kind/images/build.sh orchestrator BINARY [TAG]
#                                              the orchestrator (serve and the replicas sidecar)
#                                              from a binary of the workspace, with the shared
#                                              libraries it links and nothing else; tagged dev
#                                              unless TAG is given
#   kind/images/build.sh busybox               Debian's busybox with the C library it links,
#                                              for the suite's replicas
#   kind/images/build.sh kueue BINARY          Kueue's manager from its static binary
#                                              (kind/kueue/deploy.sh builds it)
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ORCHESTRATOR_IMAGE=opendilab/di-orchestrator
BUSYBOX_IMAGE=di-e2e/busybox:1.35   # Debian bookworm's busybox is 1.35; tests/e2e/src/nodes.rs names it
KUEUE_IMAGE=di-kind/kueue:$KUEUE_VERSION

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs"

# Copies a dynamically linked binary to PATH in the image, with the dynamic loader and the
# libraries it links at the paths it looks them up.
install_linked() { # install_linked BINARY PATH
  install -D "$1" "$ctx/rootfs$2"
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | while read -r lib; do
    cp --parents -L "$lib" "$ctx/rootfs"
  done
}

case ${1:-} in
  orchestrator)
    binary=${2:?usage: build.sh orchestrator BINARY}
    [[ -x $binary ]] || die "$binary is not an executable; build it first (cargo build -p di-orchestrator)"
    install_linked "$binary" /usr/local/bin/di-orchestrator
    cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
# A debug build's deserializers need deeper stacks than Rust's default 2 MiB per thread.
ENV RUST_MIN_STACK=16777216
# Non-root, as the Deployment's security context and the sidecar's runAsNonRoot require; the
# sidecar states this UID (SIDECAR_USER in pkg/core/src/desired/sidecar.rs).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/di-orchestrator"]
DOCKERFILE
    image=$ORCHESTRATOR_IMAGE:${3:-dev}
    ;;
  busybox)
    # Debian's dynamically linked busybox, taken from its package without installing it: a
    # static one resolves no DNS name (glibc's resolver cannot be linked statically), and the
    # suite's pods reach each other by name.
    deb_dir=$CACHE_ROOT/kind/debs
    mkdir -p "$deb_dir"
    if ! ls "$deb_dir"/busybox_*.deb >/dev/null 2>&1; then
      (cd "$deb_dir" && { apt-get download busybox >/dev/null 2>&1 || { apt-get update -qq && apt-get download busybox >/dev/null; }; })
    fi
    dpkg-deb -x "$(ls "$deb_dir"/busybox_*.deb | tail -1)" "$ctx/deb"
    install_linked "$ctx/deb/bin/busybox" /bin/busybox
    for applet in $("$ctx/deb/bin/busybox" --list); do
      [[ -e $ctx/rootfs/bin/$applet ]] || ln -s busybox "$ctx/rootfs/bin/$applet"
    done
    mkdir -p "$ctx/rootfs/tmp" "$ctx/rootfs/etc"
    echo "root:x:0:0:root:/root:/bin/sh" >"$ctx/rootfs/etc/passwd"
    echo "hosts: files dns" >"$ctx/rootfs/etc/nsswitch.conf"
    printf 'FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin\nCMD ["sh"]\n' >"$ctx/Dockerfile"
    image=$BUSYBOX_IMAGE
    ;;
  kueue)
    binary=${2:?usage: build.sh kueue BINARY}
    [[ -x $binary ]] || die "$binary is not an executable; kind/kueue/deploy.sh builds it"
    # Where Kueue's manifests run it from; static (CGO off), so it needs nothing else.
    install -D "$binary" "$ctx/rootfs/manager"
    # Non-root and numeric, as its Deployment's runAsNonRoot requires.
    printf 'FROM scratch\nCOPY rootfs/ /\nUSER 65532:65532\nENTRYPOINT ["/manager"]\n' >"$ctx/Dockerfile"
    image=$KUEUE_IMAGE
    ;;
  *) die "usage: build.sh orchestrator BINARY [TAG] | busybox | kueue BINARY" ;;
esac
docker_build -t "$image" "$ctx"
echo "$image"
