//! Following a job until it runs with every replica ready (`create --wait`, `replicas add` and
//! `delete`), with one line of progress on stderr: rewritten in place on a terminal, a line per
//! change otherwise.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::bail;
use di_api::DIJob;
use di_client::wait::{Settled, WaitError, until_settled};
use kube::Api;

use crate::output;

/// Waits until the job runs with every replica ready; fails if it fails, goes, or times out.
pub async fn until_running(api: &Api<DIJob>, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let tty = std::io::stderr().is_terminal();
    let mut last = String::new();
    let show = |job: &DIJob| {
        let line = output::progress(job);
        if line == last {
            return;
        }
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
        let _ = std::io::stderr().flush();
        last = line;
    };
    match until_settled(api, name, timeout, show).await {
        Ok(Settled::Running(_)) => {
            if tty {
                eprintln!();
            }
            Ok(())
        }
        Ok(Settled::Failed { reason }) => bail!("DIJob {name} failed: {reason}"),
        Ok(Settled::Deleted) => bail!("DIJob {name} was deleted while waiting for it to run"),
        Err(WaitError::TimedOut(_)) => {
            bail!("DIJob {name} is not running with every replica ready after {timeout:?} ({last})")
        }
        Err(e) => Err(anyhow::Error::from(e).context(format!("following DIJob {name}"))),
    }
}
