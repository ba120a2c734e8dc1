//! The DIJob reconciler's edge: the caches, passes carried out against the API server, pacing,
//! events, PodGroups, leader election and metrics, around the pure core of `di-core` (what a job
//! should have, its status, a pass's plan), which it re-exports under the paths it always had.

mod asks;
mod budgets;
pub mod client;
pub mod context;
pub mod created;
pub mod creates;
mod discovery;
pub mod dispatch;
pub mod error;
pub mod events;
mod execute;
mod gauges;
pub mod identity;
pub mod index;
pub mod later;
pub mod leader;
mod members;
pub mod metrics;
mod milestones;
mod multikueue;
mod order;
pub mod owner;
pub mod pace;
mod pass;
pub mod podgroups;
mod process;
pub mod reconciler;
mod record;
pub mod refusals;
pub mod restarts;
mod stranded;
pub mod support;
pub mod teardown;
pub mod timing;
pub mod triggers;
pub mod view;
pub mod workloads;
mod writes;

// The pure core, under the paths the reconciler has always used.
pub use di_core::{decision, desired, lost, plan, queue, status, tasks};
