//! The end-to-end tier: a local control plane to run against (`controlplane`, `binaries`,
//! `certs`, `delay` for latency where production has it, `capacity` for the nodes its scheduler
//! places pods on, `kueue` for the queues beside it) and what the suite needs to drive a cluster (`cluster`, `nodes`,
//! `orchestrator`, `webhooks` to register a local one's, `admissions` asked for meanwhile,
//! `node_faults` on kind's workers, `commands` run there), the ports its processes bind
//! (`ports`), and the ends of their logs a failure shows (`logs`).

pub mod admissions;
pub mod binaries;
pub mod capacity;
pub mod certs;
pub mod cluster;
pub mod commands;
pub mod controlplane;
pub mod delay;
pub mod ding;
pub mod history;
pub mod kueue;
pub mod logs;
pub mod node_faults;
pub mod nodes;
pub mod orchestrator;
pub mod ports;
pub mod runs;
pub mod scenario;
pub mod webhooks;
