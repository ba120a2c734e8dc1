//! Which cluster a queue scenario runs on, and whose turn it is.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{obtain, start};
use crate::binaries::{self, Unavailable};
use crate::cluster::{TestCluster, connect, not_applicable, skip};
use crate::controlplane::{ControlPlane, Options};
use crate::nodes::real_nodes;

/// How a queue scenario shares the cluster with the others of its test binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// Beside the others.
    Beside,
    /// Alone: it takes away what the others need (on kind, the deployed orchestrator, whose
    /// webhook every write of a DIJob goes through).
    Alone,
}

/// Turns on a cluster with Kueue. Beside a control plane each scenario starts its own, one at a
/// time (the plane's run folder is named after the test process); on kind they share the cluster,
/// but for one that runs [`Share::Alone`].
static TURNS: RwLock<()> = RwLock::const_new(());

/// A turn, held until it is dropped.
pub(super) enum Turn {
    Beside { _guard: RwLockReadGuard<'static, ()> },
    Alone { _guard: RwLockWriteGuard<'static, ()> },
}

pub(super) async fn turn(share: Share) -> Turn {
    match share {
        Share::Beside => Turn::Beside { _guard: TURNS.read().await },
        Share::Alone => Turn::Alone { _guard: TURNS.write().await },
    }
}

/// A cluster with Kueue, the scenario's for as long as it holds this.
pub struct WithKueue {
    /// The control plane the scenario started, and Kueue's manager and module for it.
    plane: Option<(ControlPlane, PathBuf, PathBuf)>,
    _turn: Turn,
}

impl WithKueue {
    /// Installs Kueue beside the scenario's control plane (see [`before_kueue`]).
    pub async fn install(&mut self, cluster: &TestCluster) {
        let (plane, binary, module) = self.plane.as_mut().expect("a control plane of the scenario's own");
        start(plane, cluster, binary, module).await.unwrap();
    }

    /// Stops the control plane the scenario started (on kind there is none: the cluster stays).
    pub async fn stop(self) {
        if let Some((plane, ..)) = self.plane {
            plane.stop().await;
        }
    }
}

/// A cluster with Kueue for a queue scenario: on kind the cluster under test, where kind/up.sh
/// deployed it; otherwise a control plane of its own with Kueue beside it. `None` after saying
/// why there is none.
pub async fn with_kueue(share: Share) -> Option<(WithKueue, TestCluster)> {
    if real_nodes() {
        let turn = turn(share).await;
        let cluster = Box::pin(connect()).await;
        deployed(&cluster).await;
        return Some((WithKueue { plane: None, _turn: turn }, cluster));
    }
    let (mut with, cluster) = Box::pin(own_plane()).await?;
    with.install(&cluster).await;
    Some((with, cluster))
}

/// A control plane of the scenario's own with no Kueue yet, for one that installs it while the
/// orchestrator runs ([`WithKueue::install`]); `None` on kind, whose Kueue is there from the
/// start, after saying so.
pub async fn before_kueue() -> Option<(WithKueue, TestCluster)> {
    if real_nodes() {
        not_applicable("Kueue is installed on kind before the orchestrator, and stays");
        return None;
    }
    Box::pin(own_plane()).await
}

async fn own_plane() -> Option<(WithKueue, TestCluster)> {
    let root = binaries::repo_root();
    let binaries = match binaries::obtain(&root).unwrap() {
        Ok(binaries) => binaries,
        Err(Unavailable(why)) => {
            skip(&format!("Kueue's tests need a control plane: {why}"));
            return None;
        }
    };
    let (kueue, module) = match obtain(&root).unwrap() {
        Ok(found) => found,
        Err(Unavailable(why)) => {
            skip(&why);
            return None;
        }
    };
    let turn = turn(Share::Alone).await;
    let runs = root.join(".cache/controlplane/runs");
    let plane = Box::pin(ControlPlane::start_with(&binaries, &runs, &Options::default())).await.unwrap();
    let cluster = TestCluster { client: plane.client().await.unwrap(), kubeconfig: plane.kubeconfig.clone() };
    Some((WithKueue { plane: Some((plane, kueue, module)), _turn: turn }, cluster))
}

/// Fails unless the kind cluster has Kueue: a cluster made before kind/up.sh deployed it would
/// hold every queued job with `NoKueue`, which says nothing about queues.
async fn deployed(cluster: &TestCluster) {
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let found = crds.get_opt("workloads.kueue.x-k8s.io").await.expect("reading CRDs");
    assert!(
        found.is_some(),
        "this kind cluster has no Kueue: kind/up.sh deploys it (make kind), before the orchestrator"
    );
}
