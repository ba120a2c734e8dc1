//! `kubectl di run --local` end to end: real processes whose "workers" are short Python scripts
//! that read their environment and reach each other over TCP at the addresses it advertises;
//! replacement by the job's rules, its outcome as the exit code, and Ctrl-C leaving nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Local runs of one machine share 127.0.0.0/24 (a second one is refused): the tests take turns.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The tests' turn, or `None` (said why) when python3, which the workers are written in, is
/// missing; under CI=true that fails instead.
fn turn() -> Option<std::sync::MutexGuard<'static, ()>> {
    if python().is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "CI=true, and python3 (the test workers' language) cannot be run");
        eprintln!("SKIPPED: python3 cannot be run; the local-run tests need it");
        return None;
    }
    Some(TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
}

/// The interpreter itself, not a wrapper in front of it (pyenv's shim is a shell script whose
/// helpers would briefly count as workers).
fn python() -> Option<&'static str> {
    static PYTHON: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let found = PYTHON.get_or_init(|| {
        let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
        let path = String::from_utf8(out.stdout).ok()?.trim().to_owned();
        (out.status.success() && !path.is_empty()).then_some(path)
    });
    found.as_deref()
}

fn kubectl_di() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-di"))
}

/// A scratch directory of its own for each test, removed when the test passes and kept (and
/// named) when it fails, for its logs.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for its logs: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn scratch(test: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("di-local-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// A container running `script` with python3, marked with `marker` so its processes can be found.
fn worker(script: &str, marker: &str) -> serde_json::Value {
    serde_json::json!({"spec": {"terminationGracePeriodSeconds": 1, "containers": [{
        "name": "di-container", "image": "python:3",
        "command": [python().unwrap_or("python3"), "-c", script],
        "env": [{"name": "DI_LOCAL_TEST", "value": marker}],
    }]}})
}

/// `kubectl di run --local` of `job`, written into `dir`, with its run directory there.
fn run_command(dir: &Path, job: &serde_json::Value) -> Command {
    let file = dir.join("job.json");
    std::fs::write(&file, job.to_string()).unwrap();
    let mut command = kubectl_di();
    command.args(["run", "--local", "-f"]).arg(&file).arg("--run-dir").arg(dir.join("run"));
    command.args(["--restart-backoff-seconds", "0.2"]);
    command
}

/// Runs `job` to its end.
fn run(dir: &Path, job: &serde_json::Value) -> Output {
    run_command(dir, job).output().unwrap()
}

/// Processes whose environment carries `marker`.
fn survivors(marker: &str) -> Vec<String> {
    let needle = format!("DI_LOCAL_TEST={marker}");
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(env) = std::fs::read(entry.path().join("environ"))
            && env.split(|b| *b == 0).any(|v| v == needle.as_bytes())
        {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

const LEARNER: &str = r#"
import os, socket
me = os.environ["DI_NODES"].split(",")[int(os.environ["DI_RANK"])]
assert os.environ["DI_JOB_ID"] == "default/mesh", os.environ["DI_JOB_ID"]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((me, 50515)); s.listen()
for _ in range(2):
    c, addr = s.accept(); print("hello from", c.recv(100).decode(), "at", addr[0], flush=True); c.close()
"#;

/// Says hello to the learner from its own address; with FAIL_FIRST, its first run fails.
const COLLECTOR: &str = r#"
import os, socket, time, sys
if os.environ.get("FAIL_FIRST") and not os.path.exists("failed-once"):
    open("failed-once", "w").close(); sys.exit(3)
me = os.environ["DI_NODES"].split(",")[int(os.environ["DI_RANK"])]
assert me in os.environ["DI_COLLECTOR_NODES"].split(",")
for _ in range(100):
    try:
        c = socket.socket(); c.bind((me, 0)); c.connect((os.environ["DI_LEARNER_NODES"], 50515)); break
    except OSError:
        time.sleep(0.1)
c.send(os.environ["KUBERNETES_POD_NAME"].encode())
time.sleep(60)
"#;

fn mesh(marker: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut collector = worker(COLLECTOR, marker);
    if extra.get("failFirst").is_some() {
        collector["spec"]["containers"][0]["env"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "FAIL_FIRST", "value": "1"}));
    }
    serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "metadata": {"name": "mesh"},
        "spec": {"backoffLimit": extra.get("backoffLimit").cloned().unwrap_or(3.into()), "tasks": [
            {"type": "learner", "template": worker(LEARNER, marker)},
            {"type": "collector", "replicas": 2, "template": collector},
        ]},
    })
}

#[test]
fn a_task_job_finds_its_peers_and_its_learner_decides() {
    let Some(_turn) = turn() else { return };
    let dir = scratch("mesh");
    let marker = format!("mesh-{}", std::process::id());
    let out = run(&dir, &mesh(&marker, serde_json::json!({})));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("mesh-learner-0   | hello from mesh-collector-0 at 127.0.0.3"), "{stdout}");
    assert!(stdout.contains("hello from mesh-collector-1 at 127.0.0.4"), "{stdout}");
    assert!(stderr.contains("the job is Succeeded"), "{stderr}");
    assert_eq!(survivors(&marker), Vec::<String>::new(), "the collectors were stopped with the job");
}

#[test]
fn a_failed_worker_is_replaced_and_past_the_limit_the_job_fails() {
    let Some(_turn) = turn() else { return };
    let dir = scratch("restart");
    let marker = format!("restart-{}", std::process::id());
    let out = run(&dir, &mesh(&marker, serde_json::json!({"failFirst": true})));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("mesh-collector-0 failed: replaced in"), "{stderr}");
    assert!(dir.join("run/mesh-collector-0/failed-once").exists(), "a replacement keeps its working directory");

    let dir = scratch("limit");
    let out = run(&dir, &mesh(&marker, serde_json::json!({"failFirst": true, "backoffLimit": 1})));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "the failed worker's code: {stderr}");
    assert!(stderr.contains("past backoffLimit 1"), "{stderr}");
    assert_eq!(survivors(&marker), Vec::<String>::new());
}

/// A 0.2 coordinator, as DI-engine's: waits for its replica endpoint, asks it for two collectors,
/// talks to one at the URL the answer gave, removes it, then exits with 4.
const COORDINATOR: &str = r#"
import json, os, socket, sys, time, urllib.request
server = "http://" + os.environ["KUBERNETES_SERVER_URL"]
assert os.environ["KUBERNETES_COORDINATOR_URL"] == "127.0.0.2:" + os.environ["COORDINATOR_PORT"]
me = {"namespace": os.environ["KUBERNETES_POD_NAMESPACE"], "coordinator": os.environ["KUBERNETES_POD_NAME"]}
def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(server + path, data=data, method=method), timeout=30) as r:
        return json.loads(r.read())
for _ in range(100):
    try:
        call("GET", "/healthz"); break
    except OSError:
        time.sleep(0.1)
added = call("POST", "/v1alpha1/replicas", dict(me, collectors={"replicas": 2}))
urls = added["data"]["collectors"]
assert added["success"] and len(urls) == 2, added
host, port = urls[1].rsplit(":", 1)
for _ in range(100):
    try:
        s = socket.create_connection((host, int(port))); break
    except OSError:
        time.sleep(0.1)
print("collector says", s.recv(100).decode(), flush=True)
removed = call("DELETE", "/v1alpha1/replicas", dict(me, collectors={"replicas": 1}))
assert removed["data"]["collectors"] == [urls[1]], removed
listed = call("GET", "/v1alpha1/replicas?namespace=%s&coordinator=%s" % (me["namespace"], me["coordinator"]))
print("left", listed["data"]["collectors"], flush=True)
sys.exit(4)
"#;

/// Serves its pod name on 0.0.0.0:$COLLECTOR_PORT, as DI-engine's collectors bind.
const ROLE_COLLECTOR: &str = r#"
import os, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(os.environ["COLLECTOR_PORT"]))); s.listen()
while True:
    c, _ = s.accept(); c.send(os.environ["KUBERNETES_POD_NAME"].encode()); c.close()
"#;

#[test]
fn a_role_job_scales_through_its_endpoint_and_ends_with_its_coordinator() {
    let Some(_turn) = turn() else { return };
    let dir = scratch("roles");
    let marker = format!("roles-{}", std::process::id());
    let job = serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "metadata": {"name": "roles"},
        "spec": {"coordinator": {"template": worker(COORDINATOR, &marker)},
                 "collector": {"replicas": 0, "template": worker(ROLE_COLLECTOR, &marker)}},
    });
    let out = run(&dir, &job);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "the coordinator's code: {stdout}{stderr}");
    assert!(stdout.contains("collector says roles-collector-1"), "{stdout}");
    assert!(stdout.contains("left ['127.0.0.3:32001']"), "{stdout}");
    assert!(stderr.contains("roles-collector-1 scaled away"), "{stderr}");
    assert_eq!(survivors(&marker), Vec::<String>::new());
}

#[test]
fn ctrl_c_stops_every_process_even_one_that_ignores_sigterm() {
    let Some(_turn) = turn() else { return };
    let dir = scratch("interrupt");
    let marker = format!("interrupt-{}", std::process::id());
    // It says it is up (a file in its working directory) only once it ignores SIGTERM.
    let stubborn =
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open('up', 'w').close(); time.sleep(120)";
    let job = serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "metadata": {"name": "stuck"},
        "spec": {"tasks": [{"name": "worker", "replicas": 2, "template": worker(stubborn, &marker)}]},
    });
    let mut child = run_command(&dir, &job).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    let up = |i: u32| dir.join(format!("run/stuck-worker-{i}/up")).exists();
    while !(up(0) && up(1)) {
        assert!(started.elapsed() < Duration::from_secs(20), "the workers never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Meanwhile a second run is refused, not left to collide with this one.
    let second = run(&dir, &job);
    let refusal = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{refusal}");
    assert!(refusal.contains(&format!("another local run (pid {})", child.id())), "{refusal}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("did not stop within 1s: SIGKILL"), "{stderr}");
    assert_eq!(survivors(&marker), Vec::<String>::new(), "{stderr}");
}

#[test]
fn kubectl_di_replicas_scales_the_local_run() {
    let Some(_turn) = turn() else { return };
    let dir = scratch("scale");
    let marker = format!("scale-{}", std::process::id());
    let wait = "import time; time.sleep(120)";
    let job = serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "metadata": {"name": "scaled"},
        "spec": {"coordinator": {"template": worker(wait, &marker)},
                 "collector": {"replicas": 1, "template": worker(wait, &marker)}},
    });
    let mut runner = run_command(&dir, &job).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let started = Instant::now();
    let add = loop {
        let out = kubectl_di().args(["replicas", "add", "scaled", "--local", "--collectors", "2"]).output().unwrap();
        if out.status.success() || started.elapsed() > Duration::from_secs(20) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let stdout = String::from_utf8_lossy(&add.stdout);
    assert_eq!(stdout, "collector added at 127.0.0.4:32002\ncollector added at 127.0.0.5:32003\n", "{add:?}");
    while survivors(&marker).len() < 4 {
        assert!(started.elapsed() < Duration::from_secs(20), "the new collectors never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    // What the webhook would refuse on a cluster is refused here, with nothing changed.
    let too_many =
        kubectl_di().args(["replicas", "add", "scaled", "--local", "--collectors", "5000"]).output().unwrap();
    let refusal = String::from_utf8_lossy(&too_many.stderr);
    assert!(refusal.contains("the local run refused") && refusal.contains("1000"), "{refusal}");
    assert_eq!(survivors(&marker).len(), 4);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(runner.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    assert_eq!(runner.wait().unwrap().code(), Some(130));
    assert_eq!(survivors(&marker), Vec::<String>::new());
    let refused = kubectl_di().args(["replicas", "add", "scaled", "--local", "--collectors", "1"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no local run answers at 127.0.0.1:22280"),
        "{refused:?}"
    );
}

fn example(name: &str) -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")).join("../../manifests/examples").join(name)
}

#[test]
fn every_example_plans_and_a_multi_gpu_learner_is_refused_by_name() {
    for name in ["demo.yaml", "cartpole-dqn.yaml", "ditask-cartpole.yaml", "sample-factory.yaml", "srl.yaml"] {
        let out = kubectl_di().args(["run", "--local", "--dry-run", "-f"]).arg(example(name)).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert!(stderr.contains("images are not pulled"), "{name}: {stderr}");
    }
    let out = kubectl_di().args(["run", "--local", "--dry-run", "-f"]).arg(example("multi-gpu-learner.yaml")).output();
    let stderr = String::from_utf8(out.unwrap().stderr).unwrap();
    assert!(stderr.contains("multi-GPU learners") && stderr.contains("spec.learner.gpus"), "{stderr}");
}

/// The Sample Factory example as it is in the repository: its workers come from the ConfigMap of
/// the same file, bind their own addresses from DI_NODES, and the learner's success ends the job.
#[test]
fn the_sample_factory_example_runs_to_success() {
    let Some(_turn) = turn() else { return };
    let dir = scratch("sample-factory");
    let mut command = kubectl_di();
    command.args(["run", "--local", "-f"]).arg(example("sample-factory.yaml")).arg("--run-dir").arg(dir.join("run"));
    let out = command.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("SGD step 190/200") && stdout.contains("] done"), "{stdout}");
    assert!(stderr.contains("is Succeeded"), "{stderr}");
    assert!(dir.join("run/configmaps/sf-appo-worker/sf_worker.py").is_file());
}

#[test]
fn a_port_something_on_the_machine_listens_on_is_passed_over() {
    let Some(_turn) = turn() else { return };
    let dir = scratch("ports");
    let marker = format!("ports-{}", std::process::id());
    // What a local etcd or kind's NodePort would hold: the port the second collector would get.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().port();
    let job = serde_json::json!({
        "apiVersion": "diengine.opendilab.org/v1alpha1", "kind": "DIJob", "metadata": {"name": "ports"},
        "spec": {"coordinator": {"template": worker(COORDINATOR, &marker)},
                 "collector": {"replicas": 0, "template": worker(ROLE_COLLECTOR, &marker)}},
    });
    let out = run_command(&dir, &job).args(["--first-port", &(taken - 2).to_string()]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "the coordinator's code: {stdout}{stderr}");
    assert!(stdout.contains("collector says ports-collector-1"), "{stdout}");
    assert!(!stderr.contains("Address already in use"), "{stderr}");
    drop(held);
}
