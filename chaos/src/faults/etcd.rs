//! etcd killed and started again under load: the API server stays up but can read and write
//! nothing until etcd is back.

use super::Finding;
use crate::plane::Plane;

pub const TITLE: &str = "etcd restarted";

pub async fn run(plane: &Plane) -> anyhow::Result<Finding> {
    super::restart::under_load(plane, "etcd", "etcd").await
}
