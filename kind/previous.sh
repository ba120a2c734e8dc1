#!/usr/bin/env bash
# The previous release, for the upgrade scenario (tests/e2e/tests/upgrade.rs): the tree at
# PREVIOUS_RELEASE (kind/lib.sh) exported from git into the cache, its orchestrator built there
# once and kept, its image (opendilab/di-orchestrator:previous) built and loaded into the kind
# cluster, and an overlay of its install manifests with that image. Prints the tree's folder.
#
#   kind/previous.sh build TARGET_DIR        only the tree and its orchestrator (no cluster needed)
#   kind/previous.sh load TARGET_DIR KIND    all of it, the image loaded with the kind binary KIND
#
# The build shares the workspace's target folder: the dependencies are the same crates at the same
# versions, so only the previous release's own crates are compiled. Those are given the version
# 0.0.0-previous: Cargo names a workspace crate's outputs by its name and version, not its folder,
# so under the workspace's own version they would overwrite the workspace's and be taken for
# them. Cargo puts the binary where the workspace's own goes, so the workspace's is built again
# after (at once: nothing changed), and nothing may run the workspace's meanwhile: kind/tier.sh
# builds it before its tiers start.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
usage="usage: previous.sh build TARGET_DIR | previous.sh load TARGET_DIR KIND"
mode=${1:?$usage}
target_dir=$(realpath -m "${2:?$usage}")
case $mode in
  build) ;;
  load) kind_bin=${3:?$usage} ;;
  *) die "$usage" ;;
esac
home=$CACHE_ROOT/previous/$PREVIOUS_RELEASE
tree=$home/tree

if [[ ! -d $tree ]]; then
  git cat-file -e "$PREVIOUS_RELEASE^{commit}" 2>/dev/null ||
    die "this clone lacks $PREVIOUS_RELEASE, the previous release the upgrade scenario installs (a shallow clone? git fetch --unshallow)"
  rm -rf "$tree.partial" && mkdir -p "$tree.partial"
  git archive "$PREVIOUS_RELEASE" | tar -x -C "$tree.partial"
  sed -i '/^\[workspace.package\]/,/^\[/ s/^version = .*/version = "0.0.0-previous"/' "$tree.partial/Cargo.toml"
  grep -q '^version = "0.0.0-previous"' "$tree.partial/Cargo.toml" || die "the previous release's Cargo.toml has no workspace version to change"
  mv "$tree.partial" "$tree"
fi
if [[ ! -x $home/di-orchestrator ]]; then
  say "building the previous release's orchestrator (${PREVIOUS_RELEASE:0:12})"
  (cd "$tree" && CARGO_TARGET_DIR=$target_dir cargo build --quiet -p di-orchestrator --bin di-orchestrator)
  cp "$target_dir/debug/di-orchestrator" "$home/di-orchestrator.partial"
  mv "$home/di-orchestrator.partial" "$home/di-orchestrator"
  CARGO_TARGET_DIR=$target_dir cargo build --quiet -p di-orchestrator --bin di-orchestrator
fi
if [[ $mode == build ]]; then
  echo "$tree"
  exit 0
fi
image=$(kind/images/build.sh orchestrator "$home/di-orchestrator" previous)
"$kind_bin" load docker-image "$image" --name "$CLUSTER_NAME" >/dev/null

# Its install manifests with that image, as kind/overlay does for the workspace's.
mkdir -p "$tree/kind/previous"
cat >"$tree/kind/previous/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../manifests/install
images:
- name: opendilab/di-orchestrator
  newTag: previous
patches:
- target:
    kind: Deployment
    name: di-orchestrator
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/env/2/value
      value: $image
YAML
echo "$tree"
