# The one image of the in-cluster parts: `di-orchestrator serve` and the `replicas` sidecar.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p di-orchestrator \
 && cp target/release/di-orchestrator /usr/local/bin/di-orchestrator

FROM debian:bookworm-slim
COPY --from=build /usr/local/bin/di-orchestrator /usr/local/bin/di-orchestrator
# Non-root, as the Deployment's security context and the sidecar's runAsNonRoot require; the
# sidecar states this UID (SIDECAR_USER in pkg/controller/src/desired/sidecar.rs).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/di-orchestrator"]
