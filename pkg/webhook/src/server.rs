//! The HTTP side of the webhooks: AdmissionReview in, AdmissionReview out. Garbage, oversized
//! bodies and reviews without a request get an HTTP error or a denial with the reason, never a
//! panic or a hang.

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

use crate::admission;

/// Largest AdmissionReview accepted. The API server refuses objects over 3 MiB, and a review
/// carries the object and the old one.
pub const MAX_BODY: usize = 7 * 1024 * 1024;

pub const MUTATE_PATH: &str = "/mutate";
pub const VALIDATE_PATH: &str = "/validate";

pub fn router() -> Router {
    Router::new()
        .route(MUTATE_PATH, post(|body: Bytes| async move { review(&body, admission::mutate) }))
        .route(VALIDATE_PATH, post(|body: Bytes| async move { review(&body, admission::validate) }))
        .route("/healthz", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(MAX_BODY))
}

fn review(body: &[u8], decide: fn(&AdmissionRequest<DynamicObject>) -> AdmissionResponse) -> Response {
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return (StatusCode::BAD_REQUEST, format!("the body is not an AdmissionReview: {e}\n")).into_response();
        }
    };
    let request: Result<AdmissionRequest<DynamicObject>, _> = review.try_into();
    let response = match request {
        Ok(request) => decide(&request),
        Err(_) => AdmissionResponse::invalid("the AdmissionReview carries no request"),
    };
    axum::Json(response.into_review()).into_response()
}
