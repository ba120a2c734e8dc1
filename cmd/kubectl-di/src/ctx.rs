//! The cluster a command talks to, as kubectl would pick it, and what most commands ask of it.

use anyhow::{Context, anyhow};
use di_api::DIJob;
use di_api::contract::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::cli::Global;

/// Field manager of what the plugin writes.
pub const MANAGER: &str = "kubectl-di";

pub struct Ctx {
    pub client: Client,
    pub namespace: String,
}

impl Ctx {
    /// Connects as `--kubeconfig` and `--context` say, in `-n` or the context's namespace.
    pub async fn connect(global: &Global) -> anyhow::Result<Ctx> {
        let kubeconfig = match &global.kubeconfig {
            Some(path) => Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?,
            None => Kubeconfig::read().context("reading the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
        };
        let options = KubeConfigOptions { context: global.context.clone(), ..Default::default() };
        let config = Config::from_custom_kubeconfig(kubeconfig, &options).await.context("loading the kubeconfig")?;
        let namespace = global.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
        Ok(Ctx { client: Client::try_from(config)?, namespace })
    }

    /// The DIJobs of the namespace.
    pub fn jobs(&self) -> Api<DIJob> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The pods the reconciler labelled as the job's.
    pub async fn job_pods(&self, name: &str) -> anyhow::Result<Vec<Pod>> {
        let params = ListParams::default().labels(&format!("{}={name}", labels::JOB_NAME));
        Ok(self.pods().list(&params).await.map_err(|e| explain(e, "listing the job's pods"))?.items)
    }

    /// The job, or an error saying it cannot be had.
    pub async fn job(&self, name: &str) -> anyhow::Result<DIJob> {
        self.jobs().get(name).await.map_err(|e| explain(e, &format!("getting DIJob {name}")))
    }
}

/// A kube error with what was being done, and the API server's message as is (it names fields).
pub fn explain(e: kube::Error, doing: &str) -> anyhow::Error {
    match e {
        kube::Error::Api(status) => anyhow!("{doing}: {}", status.message),
        other => anyhow!("{doing}: {other}"),
    }
}
