//! The DIJob reconciler. Pure decisions (`desired`, `status`, `plan`, `pace`) sit at the core; the
//! Kubernetes I/O (`reconciler`, `leader`) at the edge.

pub mod context;
pub mod created;
pub mod creates;
pub mod decision;
pub mod desired;
mod discovery;
pub mod error;
pub mod events;
mod execute;
mod gangs;
pub mod identity;
pub mod index;
pub mod leader;
pub mod lost;
pub mod metrics;
pub mod owner;
pub mod pace;
mod pass;
pub mod plan;
pub mod podgroups;
pub mod reconciler;
pub mod restarts;
pub mod status;
pub mod support;
pub mod tasks;
pub mod timing;
pub mod triggers;
pub mod view;
