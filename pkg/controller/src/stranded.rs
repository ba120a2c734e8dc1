//! The I/O of `di_core::stranded`: a collector Terminating past its grace period is deleted at
//! once when its node is lost (gone, or no longer reporting), so its replacement can take its
//! name; while its node still answers, its kubelet is left to stop it.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use tracing::warn;

use crate::context::Context;
use crate::error::Error;

/// Whether the pod `name` (this `uid`) on `node` was released. A node that cannot be read is
/// taken as not lost, and said in the log: the pass goes on with its other steps (the creates of
/// the job's other pods among them), and the next looks again.
pub(crate) async fn release(ctx: &Context, pods: &Api<Pod>, name: &str, uid: &str, node: &str) -> Result<bool, Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let found = match nodes.get_opt(node).await {
        Ok(found) => found,
        Err(error) => {
            warn!(pod = name, node, %error, "reading the node of a collector stuck terminating");
            return Ok(false);
        }
    };
    if !di_core::node_loss::node_lost(found.as_ref()) {
        return Ok(false);
    }
    crate::writes::delete_now(pods, name, uid).await
}
