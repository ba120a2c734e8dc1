# The entry points people type. Every target works from a clean clone.

CARGO ?= cargo
CRDS  := manifests/crds

.PHONY: all build test lint fmt manifests check-manifests

all: build

## build: compile every crate of the workspace
build:
	$(CARGO) build --workspace --all-targets

## test: unit and component tests, and a check that the checked-in CRDs are current
test: check-manifests
	$(CARGO) test --workspace

## lint: formatting and clippy, warnings are errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## fmt: format the code
fmt:
	$(CARGO) fmt --all

## manifests: regenerate the CRDs from the Rust types in pkg/api
manifests:
	$(CARGO) run --quiet -p di-api --bin crdgen -- $(CRDS)

## check-manifests: fail when the checked-in CRDs differ from what the types generate
check-manifests:
	$(CARGO) run --quiet -p di-api --bin crdgen -- --check $(CRDS)

help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed 's/^## /  /'
