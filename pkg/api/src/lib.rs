//! The DIJob API of di-orchestrator: the custom resources, the pod contract they imply (and how a
//! pod is read back under it), and the defaulting and validation rules that the webhook, the
//! reconciler and the CLI all share.

pub mod aggregator_config;
pub mod claims;
pub mod contract;
pub mod crd;
pub mod defaults;
pub mod dijob;
pub mod gang;
pub mod manifest;
pub mod pod;
pub mod reference;
pub mod resources;
mod schema;
pub mod task;
pub mod tasks;
pub mod validation;

pub use aggregator_config::{AggregatorConfig, AggregatorConfigSpec, AggregatorSpec};
pub use contract::Role;
pub use dijob::GangSpec;
pub use dijob::{
    CollectorSpec, CollectorsAboveCore, CoordinatorSpec, DIJob, DIJobCondition, DIJobSpec, DIJobStatus, LearnerSpec,
    Phase, ReplicaStatus,
};
pub use task::{JobRestartPolicy, Priority, TaskSpec, TaskType};
pub use validation::{FieldError, ValidationErrors};
