//! 100 concurrent scale requests (+1 to +3 collectors) to one job's replica endpoint, a quarter
//! of their clients hanging up: half right after sending, half at moments spread over the next
//! ten seconds, while their request waits. Each request must be applied exactly once or not at all: the job's final
//! desired count, and the number of writes of its spec (its generation), must be explained by the
//! requests answered with success plus some of the hung-up ones (`exactly_once`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use di_api::DIJob;
use di_e2e::orchestrator::Sidecar;
use serde_json::json;

use super::Finding;
use crate::checks::{Expect, Verdict};
use crate::exactly_once::{self, Observed, Requests};
use crate::plain_http;
use crate::plane::Plane;
use crate::world::World;

pub const TITLE: &str = "100 concurrent scale requests to one replica endpoint, clients hanging up";
pub const LOAD: &str = "1 job of 2 collectors; 100 concurrent POST /replicas of +1 to +3 collectors";

const JOB: &str = "scaled";
const INITIAL: i32 = 2;
const REQUESTS: usize = 100;
/// How long a request may take: the endpoint waits up to 30 s for the pods, after its turn.
const ANSWER: Duration = Duration::from_secs(180);

/// What became of one request.
enum Fate {
    Answered { add: i64, success: bool, status: u16 },
    HungUp { add: i64 },
}

pub async fn run(plane: &Plane) -> anyhow::Result<Finding> {
    let world = World::new(plane, "replicas").await?;
    let orchestrator = world.orchestrator("", &[]).await;
    world.submit(JOB, INITIAL, json!({})).await?;
    let running = [Expect::running(JOB, INITIAL)];
    let ready = world.verdict(&running, Duration::from_secs(60), true).await?;
    if !ready.lost.is_empty() {
        bail!("the job did not start: {}", ready.lost.join("; "));
    }
    let sidecar = Box::pin(Sidecar::start(&world.cluster, &world.ns, JOB)).await;
    let addr: SocketAddr = sidecar.url.trim_start_matches("http://").parse()?;
    until_serving(addr).await.with_context(|| format!("the replica endpoint did not start:\n{}", sidecar.log()))?;
    let before = world.jobs.get(JOB).await?;

    let body = |add: i64| {
        json!({"namespace": world.ns, "coordinator": format!("{JOB}-coordinator"), "collectors": {"replicas": add}})
            .to_string()
    };
    let mut tasks = vec![];
    for i in 0..REQUESTS {
        let add = 1 + (i % 3) as i64;
        let request = plain_http::request_bytes("POST", addr, "/v1alpha1/replicas", Some(&body(add)));
        tasks.push(tokio::spawn(async move {
            let stream = plain_http::send(addr, &request).await?;
            match i % 8 {
                // Gone as soon as the request is out.
                3 => {
                    drop(stream);
                    Ok(Fate::HungUp { add })
                }
                // Gone while the request waits: for its turn to write (the endpoint writes one
                // request at a time, over several seconds for all of them) or, once written, for
                // the pods. The moments are spread over that time.
                7 => {
                    tokio::time::sleep(Duration::from_millis(50 + (i as u64 * 977) % 10_000)).await;
                    drop(stream);
                    Ok(Fate::HungUp { add })
                }
                _ => {
                    let answer = tokio::time::timeout(ANSWER, plain_http::read_answer(stream)).await??;
                    let envelope: serde_json::Value = serde_json::from_str(&answer.body).unwrap_or_default();
                    Ok::<_, anyhow::Error>(Fate::Answered {
                        add,
                        success: answer.status == 200 && envelope["success"] == true,
                        status: answer.status,
                    })
                }
            }
        }));
    }
    let mut requests = Requests::default();
    let mut refusals = vec![];
    for task in tasks {
        match task.await?? {
            Fate::Answered { add, success: true, .. } => requests.accepted.push(add),
            Fate::Answered { add, status, .. } => {
                requests.refused.push(add);
                refusals.push(status);
            }
            Fate::HungUp { add } => requests.dropped.push(add),
        }
    }
    // One more request, after every other has ended: the endpoint takes writes in turn, so once
    // this one is answered every hung-up request has been written or dropped for good.
    let last = plain_http::call("POST", addr, "/v1alpha1/replicas", Some(&body(1)), ANSWER).await?;
    if last.status != 200 {
        bail!("the last request was refused ({}): {}", last.status, last.body);
    }
    requests.accepted.push(1);
    let after = world.jobs.get(JOB).await?;

    let (initial, last) = (desired(&before), desired(&after));
    let writes = after.metadata.generation.unwrap_or(0) - before.metadata.generation.unwrap_or(0);
    let mut verdict = Verdict::default();
    let answered = requests.accepted.len() + requests.refused.len();
    verdict.check(format!(
        "{answered} answered: {} with success, {} refused {refusals:?}; {} hung up",
        requests.accepted.len(),
        requests.refused.len(),
        requests.dropped.len()
    ));
    match exactly_once::explain(&requests, Observed { initial, last, writes }) {
        Ok(applied) => verdict.check(format!(
            "desired {last} = {initial} + {} accepted + {} from {} of the {} hung-up requests, in {writes} spec writes: each applied once or not at all",
            requests.accepted.iter().sum::<i64>(),
            applied.iter().map(|&i| requests.dropped[i]).sum::<i64>(),
            applied.len(),
            requests.dropped.len()
        )),
        Err(why) => verdict.lose(why),
    }
    verdict.merge(world.verdict(&[Expect::running(JOB, last as i32)], Duration::from_secs(180), true).await?);
    crate::world::keep_log("replicas", &orchestrator);
    let _ = std::fs::write(crate::out_dir()?.join("replicas-endpoint.log"), sidecar.log());
    Ok(Finding { load: format!("{LOAD}, {} clients hanging up", requests.dropped.len()), verdict })
}

fn desired(job: &DIJob) -> i64 {
    job.spec.collector_replicas().into()
}

/// Waits until the endpoint answers its health check (it has no other sign of life).
async fn until_serving(addr: SocketAddr) -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let answer = plain_http::call("GET", addr, "/healthz", None, Duration::from_secs(2)).await;
            if answer.is_ok_and(|a| a.status == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .context("no answer to /healthz within 30 s")
}
