#!/usr/bin/env bash
# The kind tier as `make test` runs it: `make e2e` on a fresh cluster, then everything torn down
# (cluster, host sysctls, the Docker daemon it started), pass or fail. When Docker cannot be had
# here it says why and passes, except under CI=true, where that is a failure.
#
#   kind/tier.sh [-- COMMAND...]
#
# With a COMMAND (`make test` gives it the control-plane tier), the kind tier runs beside it: the
# control-plane tier waits on its API servers more than it computes, and the kind tier on its
# nodes (a node fault is minutes of waiting for the node controller), so side by side the two
# take about the time of the longer, and on a machine with nothing cached the builds of each fill
# the other's waits. Builds both need are made once, under a lock in the cache (the Kubernetes
# release, Kueue); the previous release's orchestrator, which passes through the workspace's
# target folder, is built before both start. The kind tier's lines are marked `kind|`. Each runs
# to its end; the tier fails when either does.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

beside=()
if [[ ${1:-} == -- ]]; then
  shift
  beside=("$@")
fi

why_not=""
if ! docker_answers; then
  if [[ $(id -u) != 0 ]]; then
    why_not="no Docker daemon answers, and starting one needs root"
  elif ! command -v dockerd >/dev/null && ! command -v apt-get >/dev/null; then
    why_not="no Docker daemon answers, and neither dockerd nor apt-get (to install it) is here"
  fi
fi
if [[ -n $why_not ]]; then
  ((${#beside[@]} == 0)) || "${beside[@]}"
  echo "SKIPPED: the kind tier (real nodes): $why_not." >&2
  if [[ ${CI:-} == true || ${CI:-} == 1 ]]; then
    echo "kind/tier.sh: CI=true: the kind tier must run in CI, so this is a failure." >&2
    exit 1
  fi
  exit 0
fi

trap 'kind/down.sh' EXIT
start=$SECONDS
if ((${#beside[@]} == 0)); then
  KIND_FRESH=1 make --no-print-directory e2e
  say "kind tier passed in $((SECONDS - start)) s"
  exit 0
fi
kind/previous.sh build "${CARGO_TARGET_DIR:-target}" >/dev/null
(set -o pipefail; KIND_FRESH=1 make --no-print-directory e2e 2>&1 | sed -u 's/^/kind| /') &
kind=$!
status=0
"${beside[@]}" || status=$?
kind_status=0
wait "$kind" || kind_status=$?
((status == 0)) || echo "kind/tier.sh: ${beside[*]} failed (exit $status)" >&2
((kind_status == 0)) || die "the kind tier failed (exit $kind_status; its lines are marked kind|)"
((status == 0)) || exit "$status"
say "the kind tier and ${beside[*]} passed in $((SECONDS - start)) s"
