//! A job's core PodDisruptionBudget against the API server: applied (server-side, so a repeat is
//! one idempotent request) before the core pods it covers are created. It goes with its job.

use std::sync::Arc;

use di_api::DIJob;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::decision::Action;
use crate::error::Error;

/// Applies the budget of `actions`, if any; a refusal fails the pass, so the core pods it would
/// cover wait for the next.
pub(crate) async fn apply(ctx: &Arc<Context>, job: &DIJob, actions: &[Action]) -> Result<(), Error> {
    let Some(budget) = actions.iter().find_map(|a| match a {
        Action::ApplyDisruptionBudget(budget) => Some(&**budget),
        _ => None,
    }) else {
        return Ok(());
    };
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    // k8s-openapi writes the type's apiVersion and kind, as an apply needs.
    crate::writes::apply(&api, &budget.name_any(), budget, "PodDisruptionBudget").await
}
