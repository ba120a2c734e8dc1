//! DIJobs asked for all along (server-side dry runs through the orchestrator's webhooks) while
//! something happens to its pods: a drain of their node, an upgrade's rollout. Users apply jobs
//! at any moment, and none may be refused for it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cluster::unretried_client;

/// How often a job is asked for.
const EVERY: Duration = Duration::from_millis(250);

/// The dry runs under way.
pub struct Admissions {
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Asked>,
}

/// What the dry runs met.
#[derive(Debug, Default)]
pub struct Asked {
    pub answered: u32,
    /// Each refusal: when (since the start) and the API server's answer.
    pub refused: Vec<String>,
}

impl Admissions {
    /// Asks for a job in `namespace` of the cluster of `kubeconfig` every 250 ms, with a client
    /// without retries (so a refusal is seen as the user would see it), until
    /// [`Admissions::stop`].
    pub async fn start(kubeconfig: &Path, namespace: &str) -> Admissions {
        let client = unretried_client(kubeconfig).await.expect("a client");
        let done = Arc::new(AtomicBool::new(false));
        let (stop, namespace) = (done.clone(), namespace.to_string());
        let task = tokio::spawn(async move {
            let (start, mut asked) = (Instant::now(), Asked::default());
            let mut pace = tokio::time::interval(EVERY);
            while !stop.load(Ordering::Relaxed) {
                pace.tick().await;
                match di_client::wait::webhook_answers(&client, &namespace).await {
                    Ok(()) => asked.answered += 1,
                    Err(e) => {
                        // The API server's words; kube's rendering of the Status after them adds nothing.
                        let said: String = e.to_string().chars().take(240).collect();
                        asked.refused.push(format!("{:.1} s: {said}", start.elapsed().as_secs_f64()));
                    }
                }
            }
            asked
        });
        Admissions { done, task }
    }

    /// Stops asking; what was met.
    pub async fn stop(self) -> Asked {
        self.done.store(true, Ordering::Relaxed);
        self.task.await.expect("the dry runs ended")
    }
}
