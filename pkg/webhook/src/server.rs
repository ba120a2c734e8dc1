//! The HTTP side of the webhooks: AdmissionReview in, AdmissionReview out. Garbage, oversized
//! bodies and reviews without a request get an HTTP error or a denial with the reason, never a
//! panic or a hang; a body is read only within its lane and its deadline (`limits`).

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};

use std::sync::Arc;

use crate::admission;
use crate::claims::Claims;
use crate::limits::{Lane, Lanes, Limits};
use crate::queues::Queues;

pub use crate::limits::MAX_BODY;

pub const MUTATE_PATH: &str = "/mutate";
pub const VALIDATE_PATH: &str = "/validate";

type Decide = Arc<dyn Fn(&AdmissionRequest<DynamicObject>) -> AdmissionResponse + Send + Sync>;

pub fn router() -> Router {
    router_with(&Limits::default())
}

pub fn router_with(limits: &Limits) -> Router {
    router_checking(limits, None, None)
}

/// The webhooks, the validating one also refusing a new job whose names another job claims
/// (`claims`, kept from a watch of the jobs), the mutating one giving MultiKueue a new job whose
/// queue goes through it (`queues`, kept from watches of Kueue's queues).
pub fn router_checking(limits: &Limits, claims: Option<Claims>, queues: Option<Queues>) -> Router {
    let lanes = Lanes::new(limits);
    let deadline = limits.request;
    let route = |decide: Decide| {
        let lanes = lanes.clone();
        post(move |body: Body| async move {
            let answer = tokio::time::timeout(deadline, answer(&lanes, body, decide.clone()));
            answer.await.unwrap_or_else(|_| {
                (StatusCode::REQUEST_TIMEOUT, format!("no whole AdmissionReview within {deadline:?}\n")).into_response()
            })
        })
    };
    Router::new()
        .route(MUTATE_PATH, route(Arc::new(move |request| admission::mutate_with(request, queues.as_ref()))))
        .route(VALIDATE_PATH, route(Arc::new(move |request| admission::validate_against(request, claims.as_ref()))))
        .route("/healthz", get(|| async { "ok" }))
}

async fn answer(lanes: &Lanes, body: Body, decide: Decide) -> Response {
    // Its Content-Length, as hyper read it.
    let length = body.size_hint().exact();
    // Refused before a byte of the body is read; hyper then closes the connection unread.
    if length.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    let lane = Lane::of(length);
    let _permit = lanes.enter(lane).await;
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return too_large(),
        Err(e) => return (StatusCode::BAD_REQUEST, format!("reading the body: {e}\n")).into_response(),
    };
    match lane {
        Lane::Small => review(&body, &decide),
        // Parsing MiBs takes long enough to hold up the Lease's renewals on the runtime's thread.
        Lane::Large => tokio::task::spawn_blocking(move || review(&body, &decide)).await.unwrap_or_else(|e| {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("deciding the review: {e}\n")).into_response()
        }),
    }
}

fn too_large() -> Response {
    (StatusCode::PAYLOAD_TOO_LARGE, format!("an AdmissionReview is at most {MAX_BODY} bytes\n")).into_response()
}

fn review(body: &Bytes, decide: &Decide) -> Response {
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
