#!/usr/bin/env bash
# Deletes the kind cluster kind/up.sh created.
set -euo pipefail
kind delete cluster --name "${KIND_CLUSTER:-di-orchestrator}"
