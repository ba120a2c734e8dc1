# The entry points people type. Every target works from a clean clone.

CARGO ?= cargo
# Where cargo puts what it builds (CI keeps it outside the clone, in the cache).
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

.PHONY: all build bench bench-verdict bench-publish bench-build demo test unit e2e-local e2e e2e-kind image kind kind-down deploy controlplane lint fmt manifests check-manifests help

all: build

## build: compile every crate of the workspace
build:
	$(CARGO) build --workspace --all-targets

## demo: the main job: a demo DIJob driven to Running on the cluster the kubeconfig names,
##       or on the local control plane when none answers
demo:
	$(CARGO) build --quiet -p di-orchestrator -p di-e2e --bins
	$(TARGET_DIR)/debug/di-demo

## bench: the headline, each figure against a baseline measured in the same run: time to Running
##        at four sizes, memory, the webhook; about 13 minutes on 2 cores once built (target/bench/report.md)
bench: bench-build
	DI_BIN_PROFILE=release $(TARGET_DIR)/release/di-bench --headline

## bench-verdict: every benchmark, time to Running judged over three invocations; over an hour
##        (a part of it: make bench-verdict BENCH_ARGS="--only reclaim", see di-bench --help)
bench-verdict: bench-build
	DI_BIN_PROFILE=release $(TARGET_DIR)/release/di-bench $(BENCH_ARGS)

## bench-publish: the last report into docs/bench/, a headline's table into README.md and
##        docs/PERFORMANCE.md (refused for a part, or a run on uncommitted changes)
bench-publish:
	$(CARGO) run --quiet -p di-bench -- publish

bench-build:
	$(CARGO) build --release --quiet -p di-orchestrator -p di-bench

## chaos: the orchestrator on the local control plane under faults (kill -9, API server and etcd
##        restarts, a frozen leader, ...) and what each lost, which must be nothing; 4 to 10
##        minutes (target/chaos/report.md; one fault: make chaos CHAOS_ARGS="--only kill9")
.PHONY: chaos
chaos:
	$(CARGO) build --quiet -p di-orchestrator -p di-chaos --bins
	$(E2E_ENV) $(TARGET_DIR)/debug/di-chaos $(CHAOS_ARGS)

## test: every tier: unit and component tests, then the e2e suite on a local control plane and,
##       side by side with it, on a kind cluster with real nodes (skipped, saying why, where
##       Docker cannot be had; under CI=true that is a failure)
test: unit
	kind/tier.sh -- $(MAKE) --no-print-directory e2e-local

## unit: unit and component tests, and a check that the checked-in CRDs are current
unit: check-manifests
	$(CARGO) test --workspace

# A DIJob's deserializer takes a deep stack in debug builds: the suite's test threads get more
# than the default 2 MiB. A failed scenario names its line and prints the logs that explain it;
# a backtrace through the async runtime adds some 60 lines that do not, and would push the
# other failures of a run out of a short excerpt of it.
E2E_ENV = RUST_MIN_STACK=16777216 RUST_BACKTRACE=0

## e2e-local: the e2e suite against a real kube-apiserver, etcd and kube-controller-manager
##            started on loopback (built from hack/controlplane on first use, cached in ~/.cache/di-orchestrator)
e2e-local:
	$(CARGO) build --quiet -p di-orchestrator -p kubectl-di -p di-e2e --bins --tests
	$(E2E_ENV) $(TARGET_DIR)/debug/di-controlplane run --prefetch -- $(CARGO) test -p di-e2e --tests --no-fail-fast -- --ignored

## e2e: the same suite on the kind cluster `make kind` brings up, with the orchestrator deployed
##      in it and pods run by a real kubelet (the cluster stays up; make kind-down removes it)
e2e: kind
	$(CARGO) build --quiet -p di-orchestrator -p kubectl-di -p di-e2e --bins --tests
	previous=$$(kind/previous.sh load $(TARGET_DIR) "$$(kind/host/tool.sh kind)") && PATH="$$($(TARGET_DIR)/debug/di-controlplane release):$$PATH" DI_E2E_HELM="$$(kind/host/tool.sh helm)" DI_E2E_PREVIOUS=$$previous $(E2E_ENV) DI_E2E_KUBECONFIG=$(CURDIR)/.cache/kind.kubeconfig DI_E2E_NODES=real $(CARGO) test -p di-e2e --tests --no-fail-fast -- --ignored

## e2e-kind: the kind tier alone: a fresh cluster, make e2e, then all torn down (make test
##           runs it beside e2e-local)
e2e-kind:
	kind/tier.sh

## image: build the orchestrator's image from source, tagged IMAGE (default
##        opendilab/di-orchestrator:dev; pulls the Rust and Debian base images; kind/up.sh builds
##        one offline from the workspace's binary)
IMAGE ?= opendilab/di-orchestrator:dev
image:
	docker build -t $(IMAGE) .

## kind: from nothing to the orchestrator deployed on a kind cluster (kind/up.sh: starts dockerd
##       if none answers, builds kind and, without a registry, the node image into the cache)
kind:
	kind/up.sh

## kind-down: delete the kind cluster, restore the host sysctls, stop a dockerd kind/up.sh started
kind-down:
	kind/down.sh

## deploy: install the orchestrator into the cluster of the current kubeconfig context
deploy:
	kubectl apply --server-side -k manifests/install

## controlplane: start the local control plane and keep it up until Ctrl-C (prints its KUBECONFIG)
controlplane:
	$(CARGO) build --quiet -p di-e2e --bin di-controlplane
	$(TARGET_DIR)/debug/di-controlplane up

## lint: formatting and clippy, warnings are errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## fmt: format the code
fmt:
	$(CARGO) fmt --all

## manifests: regenerate the CRDs from the Rust types in pkg/api (manifests/ and the Helm chart)
manifests:
	$(CARGO) run --quiet -p di-api --bin crdgen -- .

## check-manifests: fail when the checked-in CRDs differ from what the types generate
check-manifests:
	$(CARGO) run --quiet -p di-api --bin crdgen -- --check .

help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed 's/^## /  /'
