//! The reconciler's pure core, shared by the orchestrator's reconciler and `kubectl di run
//! --local`: what a DIJob should have (`desired`: pods, Services, RBAC, gangs' PodGroups), its
//! status from its pods (`status`), and one pass's decision (`decision`, with the role planner
//! `plan`, the task planner `tasks`, their gangs `gangs`, and the coordinator's losses `lost`).
//! Functions of their inputs: no client, no clock but the one a caller passes in, no I/O.

pub mod budget;
pub mod decision;
pub mod desired;
pub mod disruption;
mod gangs;
pub mod lost;
pub mod node_loss;
pub mod plan;
pub mod queue;
pub mod reasons;
pub mod restarts;
pub mod status;
pub mod stranded;
pub mod tasks;
