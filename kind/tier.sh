#!/usr/bin/env bash
# The kind tier as `make test` runs it: `make e2e` on a fresh cluster, then everything torn down
# (cluster, host sysctls, the Docker daemon it started), pass or fail. When Docker cannot be had
# here it says why and passes, except under CI=true, where that is a failure.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

why_not=""
if ! docker_answers; then
  if [[ $(id -u) != 0 ]]; then
    why_not="no Docker daemon answers, and starting one needs root"
  elif ! command -v dockerd >/dev/null && ! command -v apt-get >/dev/null; then
    why_not="no Docker daemon answers, and neither dockerd nor apt-get (to install it) is here"
  fi
fi
if [[ -n $why_not ]]; then
  echo "SKIPPED: the kind tier (real nodes): $why_not." >&2
  if [[ ${CI:-} == true || ${CI:-} == 1 ]]; then
    echo "kind/tier.sh: CI=true: the kind tier must run in CI, so this is a failure." >&2
    exit 1
  fi
  exit 0
fi

trap 'kind/down.sh' EXIT
start=$SECONDS
KIND_FRESH=1 make --no-print-directory e2e
say "kind tier passed in $((SECONDS - start)) s"
