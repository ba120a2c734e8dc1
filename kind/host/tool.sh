#!/usr/bin/env bash
# Prints the path of a pinned program the kind tier uses (kind and helm on the host, CoreDNS in the
# node image), building it from its Go module on first use into the cache (outside the clone,
# keyed by version).
#
#   kind/host/tool.sh kind|helm|coredns
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
case ${1:-} in
  kind) module=sigs.k8s.io/kind version=$KIND_VERSION ;;
  helm) module=helm.sh/helm/v3/cmd/helm version=$HELM_VERSION ;;
  coredns) module=github.com/coredns/coredns version=$COREDNS_VERSION ;;
  *) die "usage: tool.sh kind|helm|coredns" ;;
esac
bin=$CACHE_ROOT/tools/$1-$version
if [[ ! -x $bin ]]; then
  command -v go >/dev/null || die "$1 $version is not in $CACHE_ROOT/tools and there is no Go toolchain to build it"
  say "building $1 $version from its Go module (first run only)"
  mkdir -p "$CACHE_ROOT/tools"
  gobin=$(mktemp -d "$CACHE_ROOT/tools/.gobin.XXXX")
  CGO_ENABLED=0 GOBIN=$gobin go install -trimpath -ldflags="-s -w" "$module@$version" >&2
  mv "$gobin/$1" "$bin"
  rm -rf "$gobin"
fi
echo "$bin"
