//! A job of 500 collectors deleted (background propagation) and submitted again under the same
//! name as soon as the old DIJob is gone, while the garbage collector still removes its 501 pods
//! and services. The new job must not take any of them for its own: it waits for its names to be
//! free and then runs with pods it created, and no name is alive twice.

use std::time::Duration;

use anyhow::Context;
use di_api::Phase;
use kube::ResourceExt;
use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use serde_json::json;

use super::Finding;
use crate::checks::{Expect, Verdict};
use crate::plane::Plane;
use crate::world::{self, World};

pub const TITLE: &str = "job re-submitted under its name while its predecessor's pods are collected";
pub const LOAD: &str = "1 job x 500 collectors, deleted and submitted again at once";

const JOB: &str = "again";
const COLLECTORS: i32 = 500;

pub async fn run(plane: &Plane) -> anyhow::Result<Finding> {
    let world = World::new(plane, "resubmit").await?;
    let orchestrator = world.orchestrator("", &[]).await;
    let first = world.submit(JOB, COLLECTORS, json!({})).await?;
    let old = first.uid().context("a created job has a UID")?;
    let full = format!("{0}/{0}", COLLECTORS);
    world
        .job_view
        .until(Duration::from_secs(300), "the first job to run every collector", |jobs| {
            let status = jobs.iter().find(|j| j.uid().as_ref() == Some(&old))?.status.clone()?;
            (status.phase == Some(Phase::Running) && status.collectors.as_deref() == Some(&full)).then_some(())
        })
        .await?;

    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions { uid: Some(old.clone()), ..Default::default() }),
        ..Default::default()
    };
    world.jobs.delete(JOB, &params).await?;
    world
        .job_view
        .until(Duration::from_secs(60), "the first job to be gone", |jobs| {
            jobs.iter().all(|j| j.uid().as_ref() != Some(&old)).then_some(())
        })
        .await?;
    let owned_by_old = |owner: Option<String>| owner.as_ref() == Some(&old);
    let left = world.pod_view.state().iter().filter(|p| owned_by_old(controller(p))).count();
    let second = world.submit(JOB, COLLECTORS, json!({})).await?;

    let mut verdict = Verdict::default();
    verdict.check(format!("submitted again with {left} of the first job's {} pods still there", COLLECTORS + 1));
    verdict.merge(world.verdict(&[Expect::running(JOB, COLLECTORS)], Duration::from_secs(400), true).await?);
    // Every pod left is the new job's (the checks above hold them to the job that exists); and
    // the old job's were each created once too, so nothing was taken over and replaced.
    let new = second.uid().unwrap_or_default();
    let (old_created, new_created) = world.monitor.read(|h| {
        let by = |uid: &str| h.creations.iter().filter(|c| c.owner.as_deref() == Some(uid)).count();
        (by(&old), by(&new))
    });
    verdict.check(format!("pods created: {old_created} by the first job, {new_created} by the second"));
    world::keep_log("resubmit", &orchestrator);
    Ok(Finding { load: format!("{LOAD} ({left} of its {} pods left)", COLLECTORS + 1), verdict })
}

fn controller(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    pod.owner_references().iter().find(|r| r.controller == Some(true)).map(|r| r.uid.clone())
}
