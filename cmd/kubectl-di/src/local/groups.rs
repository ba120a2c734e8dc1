//! The process groups of a local run: each replica runs in a group of its own, so a signal
//! reaches whatever it started; whatever is left when the run ends in any way is killed.

use std::collections::BTreeSet;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// SIGTERM now, SIGKILL to what is left after `grace` seconds, in the background.
pub(super) fn stop_later(pgid: i32, grace: u64) {
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(grace)).await;
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    });
}

/// Whether a process group still has a member.
pub(super) fn alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_ok()
}

/// The process groups started, killed when the run ends in any way (an error, a panic).
#[derive(Default)]
pub(super) struct Groups {
    pub(super) groups: BTreeSet<i32>,
}

impl Groups {
    pub(super) fn add(&mut self, pgid: i32) {
        self.groups.insert(pgid);
    }
    pub(super) fn forget(&mut self, pgid: i32) {
        // Its leader exited; children it left in the group still get the end-of-run signals.
        if !alive(pgid) {
            self.groups.remove(&pgid);
        }
    }
    pub(super) fn kill(&self, pgid: i32, signal: Signal) {
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
    pub(super) fn signal_all(&self, signal: Signal) {
        for pgid in &self.groups {
            self.kill(*pgid, signal);
        }
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        self.signal_all(Signal::SIGKILL);
    }
}
