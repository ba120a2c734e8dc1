//! The fake Kubernetes API server the component tests share: a [`kube::Client`] whose every
//! request is recorded and answered in process by a function of the request, so a test scripts
//! only what it cares about and reads back what was sent.
//!
//! ```
//! # async fn example() {
//! use di_testing::{Answer, client};
//! let (client, log) = client(|call| (call.path == "/api/v1/namespaces/ns/pods/p").then(|| Answer::status(403, "no")));
//! # let _ = (client, log);
//! # }
//! ```

mod answer;
mod call;
mod objects;
mod server;

pub use answer::{Answer, AnswerBody};
pub use call::{Call, Log};
pub use objects::{list, status, watch_event};
pub use server::{FakeApiServer, client};
