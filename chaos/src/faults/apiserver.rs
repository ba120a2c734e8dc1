//! The API server killed and started again under load.

use super::Finding;
use crate::plane::Plane;

pub const TITLE: &str = "API server restarted";

pub async fn run(plane: &Plane) -> anyhow::Result<Finding> {
    super::restart::under_load(plane, "kube-apiserver", "apiserver").await
}
