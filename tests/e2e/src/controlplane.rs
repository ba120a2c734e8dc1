//! A real Kubernetes control plane on loopback: etcd, kube-apiserver (RBAC, admission webhooks,
//! the default admission plugins with Pod Security, and OpenShift's owner reference check),
//! kube-controller-manager (garbage collection, namespaces, service accounts) and kube-scheduler
//! (binding pods to the simulated nodes, gangs among them), on free ports with throwaway
//! certificates. Stopping it, dropping it, or the next start after a crash leaves no process
//! behind.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep};

use crate::binaries::Binaries;
use crate::certs;
use crate::logs::last_lines;
use crate::ports::free_port;
use crate::runs::{kill_processes_of, reap_stale};

/// Controllers the tier relies on: garbage collection of owned objects, namespace deletion, the
/// default ServiceAccount (and its token and CA bundle) that pods need, the binding of claims to
/// the volumes a scenario provides (the scheduler places no pod whose claim is unbound), and the
/// release of a PodGroup's protection once no pod uses it (without it no PodGroup, and so no
/// job deleted in the foreground, ever goes), the HorizontalPodAutoscaler that scales a DIJob's
/// collectors through its scale subresource, and the disruption controller, whose count of a
/// PodDisruptionBudget's pods the Eviction API judges evictions by.
const CONTROLLERS: &str = "garbagecollector,namespace,serviceaccount,serviceaccount-token,root-ca-cert-publisher,\
                           persistentvolume-binder,horizontalpodautoscaling,disruption";
/// Releases a PodGroup's protection once no pod uses it; with the workload API only.
const WORKLOAD_CONTROLLERS: &str = "podgroup-protection-controller";

/// Kubernetes 1.37's gang scheduling (`scheduling.k8s.io/v1beta1` PodGroups and the scheduler's
/// GangScheduling plugin) is beta and off by default: every component must have the gate.
const FEATURE_GATES: &str = "--feature-gates=GenericWorkload=true";

/// How a control plane starts.
#[derive(Clone, Debug)]
pub struct Options {
    /// etcd's every answer this late: a production disk's fsync, which etcd's
    /// `--unsafe-no-fsync` here otherwise leaves out.
    pub etcd_delay: Option<Duration>,
    /// Whether kube-scheduler binds pods. Without it, nothing binds them but a caller that does
    /// (the bench's simulated nodes bind their own, to measure the orchestrator alone, and the
    /// coscheduling test runs its own scheduler).
    pub scheduler: bool,
    /// Kubernetes 1.37's workload API (`GenericWorkload`: PodGroups, gang scheduling); off for a
    /// release that has no such gate.
    pub workload_api: bool,
    /// One of several planes a test runs at once: its folder is `runs/<our pid>/<name>`.
    pub name: Option<&'static str>,
}

impl Default for Options {
    fn default() -> Self {
        Options { etcd_delay: None, scheduler: true, workload_api: true, name: None }
    }
}

pub struct ControlPlane {
    /// Everything of this run: certificates, etcd's data, logs, the kubeconfig.
    pub dir: PathBuf,
    /// Admin kubeconfig (system:masters).
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    children: Vec<(&'static str, Child)>,
    /// The processes a test started beside it (Kueue, a scheduler of its own), by name.
    beside: Vec<&'static str>,
    /// Between the API server and etcd, when a start asked for latency there.
    pub etcd_proxy: Option<crate::delay::DelayProxy>,
}

impl ControlPlane {
    /// Starts etcd, the API server, the controller manager and the scheduler under
    /// `runs/<our pid>/`, and returns once the API server is ready, the controller manager has
    /// acted and the simulated node the scheduler binds pods to is registered.
    pub async fn start(binaries: &Binaries, runs: &Path) -> anyhow::Result<Self> {
        Self::start_with(binaries, runs, &Options::default()).await
    }

    /// As [`ControlPlane::start`], as `options` say.
    pub async fn start_with(binaries: &Binaries, runs: &Path, options: &Options) -> anyhow::Result<Self> {
        let etcd_delay = options.etcd_delay;
        let gates = workload_api_only(options, FEATURE_GATES);
        let controllers = match options.workload_api {
            true => format!("{CONTROLLERS},{WORKLOAD_CONTROLLERS}"),
            false => CONTROLLERS.to_string(),
        };
        // One of a set keeps the others this process started (its own folder is removed below).
        reap_stale(runs, options.name.is_some());
        let mut dir = runs.join(std::process::id().to_string());
        if let Some(name) = options.name {
            dir = dir.join(name);
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(dir.join("logs"))?;
        let pki = certs::generate(&dir)?;
        let admin_cert = write(&dir, "admin.crt", &pki.admin_cert_pem)?;
        let admin_key = write(&dir, "admin.key", &pki.admin_key_pem)?;

        let [etcd_port, peer_port, api_port] = [free_port()?, free_port()?, free_port()?];
        let server = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = dir.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &server, &pki.ca_cert, &admin_cert, &admin_key)?;
        let mut plane =
            ControlPlane { dir: dir.clone(), kubeconfig, server, children: vec![], beside: vec![], etcd_proxy: None };

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        plane.spawn(
            "etcd",
            &binaries.etcd,
            &[
                "--name=e2e".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=e2e={peer_url}"),
                // Throwaway data: durability only costs time here.
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
        )?;
        let etcd_url = match etcd_delay {
            None => etcd_url,
            Some(delay) => {
                let proxy = crate::delay::DelayProxy::start(([127, 0, 0, 1], etcd_port).into(), delay).await?;
                let url = format!("http://{}", proxy.addr);
                plane.etcd_proxy = Some(proxy);
                url
            }
        };
        plane.spawn(
            "kube-apiserver",
            &binaries.kube_apiserver,
            &[
                vec![
                    format!("--etcd-servers={etcd_url}"),
                    "--bind-address=127.0.0.1".into(),
                    "--advertise-address=127.0.0.1".into(),
                    format!("--secure-port={api_port}"),
                    format!("--cert-dir={}", dir.join("apiserver").display()),
                    format!("--tls-cert-file={}", pki.serving_cert.display()),
                    format!("--tls-private-key-file={}", pki.serving_key.display()),
                    format!("--client-ca-file={}", pki.ca_cert.display()),
                    "--service-account-issuer=https://kubernetes.default.svc".into(),
                    format!("--service-account-key-file={}", pki.sa_public_key.display()),
                    format!("--service-account-signing-key-file={}", pki.sa_private_key.display()),
                    "--service-cluster-ip-range=10.96.0.0/16".into(),
                    "--authorization-mode=RBAC".into(),
                    // A namespace emptied between benchmark runs: thousands of pods deleted one
                    // after another (the default) take seconds more where etcd answers late.
                    "--delete-collection-workers=8".into(),
                    // Besides the default plugins (PodSecurity among them), OpenShift's check that
                    // whoever sets blockOwnerDeletion on a reference may update the owner's finalizers.
                    "--enable-admission-plugins=OwnerReferencesPermissionEnforcement".into(),
                    // A loopback address cannot be the endpoint of the `kubernetes` Service.
                    "--endpoint-reconciler-type=none".into(),
                    "--allow-privileged=true".into(),
                    "--v=1".into(),
                ],
                gates.clone(),
                workload_api_only(options, "--runtime-config=scheduling.k8s.io/v1beta1=true"),
            ]
            .concat(),
        )?;
        plane.wait_ready().await.context("kube-apiserver did not become ready")?;

        plane.spawn(
            "kube-controller-manager",
            &binaries.kube_controller_manager,
            &[
                vec![
                    format!("--kubeconfig={}", plane.kubeconfig.display()),
                    "--bind-address=127.0.0.1".into(),
                    "--secure-port=0".into(),
                    "--leader-elect=false".into(),
                    format!("--controllers={controllers}"),
                    // An HPA is looked at every second, not every 15: its test waits less.
                    "--horizontal-pod-autoscaler-sync-period=1s".into(),
                    // The garbage collector asks about each dependent of a deleted job, one
                    // request each: at the default 20 a second, the 2,200 objects of a benchmark
                    // run kept it busy for minutes, into the runs after.
                    "--kube-api-qps=2000".into(),
                    "--kube-api-burst=4000".into(),
                    format!("--service-account-private-key-file={}", pki.sa_private_key.display()),
                    format!("--root-ca-file={}", pki.ca_cert.display()),
                    "--v=1".into(),
                ],
                gates.clone(),
            ]
            .concat(),
        )?;
        plane.wait_default_service_account().await.context("kube-controller-manager did not create ServiceAccounts")?;
        if options.scheduler {
            let config = write(&dir, "scheduler.yaml", &scheduler_config(&plane.kubeconfig))?;
            plane.spawn(
                "kube-scheduler",
                &binaries.kube_scheduler,
                &[
                    vec![
                        format!("--config={}", config.display()),
                        // Nothing here asks for its health or metrics.
                        "--secure-port=0".into(),
                        "--v=1".into(),
                    ],
                    gates.clone(),
                ]
                .concat(),
            )?;
            crate::capacity::register(&plane.client().await?, &crate::capacity::NodeShape::default())
                .await
                .context("registering the simulated node")?;
            plane.check_alive()?;
        }
        Ok(plane)
    }

    /// An admin client for this control plane.
    pub async fn client(&self) -> anyhow::Result<Client> {
        admin_client(&self.kubeconfig).await
    }

    /// Process id of one of its processes (`etcd`, `kube-apiserver`, `kube-controller-manager`,
    /// `kube-scheduler`), for measuring what it spends.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.children.iter().find(|(n, _)| *n == name).and_then(|(_, child)| child.id())
    }

    /// Stops every process and removes the run's folder.
    pub async fn stop(mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            let _ = child.kill().await;
        }
        self.children.clear();
        kill_processes_of(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Starts another process beside the control plane (a scheduler of a test's own), logged and
    /// stopped with it.
    pub fn run_beside(&mut self, name: &'static str, binary: &Path, args: &[String]) -> anyhow::Result<()> {
        self.spawn(name, binary, args)?;
        self.beside.push(name);
        self.check_alive()
    }

    fn spawn(&mut self, name: &'static str, binary: &Path, args: &[String]) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.dir.join("logs").join(format!("{name}.log")))?;
        let child =
            spawn_logged(binary.as_os_str(), args, log).with_context(|| format!("starting {}", binary.display()))?;
        self.children.push((name, child));
        Ok(())
    }

    /// Fails with the end of a component's log when one has exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, child) in &mut self.children {
            if let Some(status) = child.try_wait()? {
                bail!("{name} exited ({status}):\n{}", last_lines(&log_of(&self.dir, name), 15));
            }
        }
        Ok(())
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut last = String::new();
        while Instant::now() < deadline {
            self.check_alive()?;
            match self.client().await {
                Ok(client) => {
                    let request = http::Request::get("/readyz").body(Vec::new())?;
                    match client.request_text(request).await {
                        Ok(body) if body.trim() == "ok" => return Ok(()),
                        Ok(body) => last = body,
                        Err(e) => last = e.to_string(),
                    }
                }
                Err(e) => last = e.to_string(),
            }
            sleep(Duration::from_millis(250)).await;
        }
        bail!("not ready after 90s: {last}")
    }

    async fn wait_default_service_account(&mut self) -> anyhow::Result<()> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client().await?, "default");
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline {
            self.check_alive()?;
            if accounts.get_opt("default").await?.is_some() {
                return Ok(());
            }
            sleep(Duration::from_millis(250)).await;
        }
        bail!("no default ServiceAccount after 90s")
    }
}

/// `flag`, when the control plane has the workload API; nothing otherwise.
fn workload_api_only(options: &Options, flag: &str) -> Vec<String> {
    options.workload_api.then(|| flag.to_string()).into_iter().collect()
}

impl Drop for ControlPlane {
    /// A failed scenario's story is also in what ran beside the plane (Kueue): the end of each
    /// one's log goes with the failure, as the orchestrator's does.
    fn drop(&mut self) {
        if std::thread::panicking() {
            for name in &self.beside {
                let tail = last_lines(&log_of(&self.dir, name), 60);
                eprintln!("{name} beside {}, last lines:\n{tail}", self.dir.display());
            }
        }
    }
}

/// What the process `name` of the plane in `dir` has logged.
fn log_of(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join("logs").join(format!("{name}.log"))).unwrap_or_default()
}

/// kube-scheduler's configuration: the admin kubeconfig, no leader election (it runs alone), and
/// a client as fast as the orchestrator's, so that binding a big job's pods is not what a test
/// waits for (the default, 50 requests a second, would be).
fn scheduler_config(kubeconfig: &Path) -> String {
    let config = serde_json::json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": 1000, "burst": 2000},
        "leaderElection": {"leaderElect": false},
    });
    serde_yaml::to_string(&config).expect("a JSON value is YAML")
}

/// A client from a kubeconfig file, whatever `KUBECONFIG` says, on the orchestrator's stack
/// (HTTP/1.1, untimed, every idle connection kept): its sockets send at once, as the Go clients
/// the harness stands in for (a user, a kubelet) do. kube's own builder leaves Nagle's algorithm on, and the simulated
/// kubelets waited on delayed ACKs under it (`docs/PERFORMANCE.md`, "Nagle's algorithm").
pub async fn admin_client(kubeconfig: &Path) -> anyhow::Result<Client> {
    let config = Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(config, &KubeConfigOptions::default()).await?;
    Ok(di_controller::client::keeping_every_connection(&config)?)
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

fn write_kubeconfig(path: &Path, server: &str, ca: &Path, cert: &Path, key: &Path) -> anyhow::Result<()> {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "di-e2e", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "di-e2e-admin", "user": {"client-certificate": cert, "client-key": key}}],
        "contexts": [{"name": "di-e2e", "context": {"cluster": "di-e2e", "user": "di-e2e-admin", "namespace": "default"}}],
        "current-context": "di-e2e",
    });
    std::fs::write(path, serde_yaml::to_string(&config)?)?;
    Ok(())
}

/// Starts one of the control plane's processes with its output in `log`, in a process group of
/// its own (a Ctrl-C reaches the harness, which stops things in order), killed when dropped.
pub fn spawn_logged(program: &std::ffi::OsStr, args: &[String], log: std::fs::File) -> std::io::Result<Child> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
}
