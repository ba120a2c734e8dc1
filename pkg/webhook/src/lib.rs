//! Admission webhooks for DIJob and AggregatorConfig: defaulting as a JSON patch, validation with
//! field-level messages, served over rustls with self-managed or mounted certificates.

pub mod admission;
pub mod certs;
pub mod claims;
pub mod limits;
pub mod queues;
pub mod server;
pub mod tls;
