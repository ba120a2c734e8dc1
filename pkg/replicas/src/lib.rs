//! The replica endpoint: DI-orchestrator 0.2's di-server API, served by a sidecar next to each
//! coordinator and scoped to its job. Requests change the DIJob's desired state through
//! `di_client`'s rules and writes; the reconciler creates and deletes the pods.

pub mod access;
mod endpoint;
mod follow;
mod quota;
pub mod scale;
pub mod server;
mod slim;
