//! The admission decisions, as pure functions of an AdmissionRequest: defaulting answers with an
//! RFC 6902 patch, validation with a denial that names every field and its fix. The rules
//! themselves live in `di_api`; this module only serves them.

use di_api::contract::GROUP;
use di_api::defaults::{default_aggregator_config, default_dijob};
use di_api::validation::{
    ValidationErrors, validate_aggregator_config, validate_dijob, validate_dijob_metadata_update, validate_dijob_update,
};
use di_api::{AggregatorConfig, DIJob};

use crate::claims::Claims;
use crate::queues::Queues;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The kinds this webhook serves.
enum Kind {
    DIJob,
    AggregatorConfig,
}

fn kind_of(request: &AdmissionRequest<DynamicObject>) -> Option<Kind> {
    if request.kind.group != GROUP {
        return None;
    }
    match request.kind.kind.as_str() {
        "DIJob" => Some(Kind::DIJob),
        "AggregatorConfig" => Some(Kind::AggregatorConfig),
        _ => None,
    }
}

fn unsupported(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let kind = &request.kind;
    let message = format!(
        "this webhook serves {GROUP} DIJob and AggregatorConfig only, not {}/{} {}; check the webhook configuration's rules",
        kind.group, kind.version, kind.kind
    );
    deny(request, 400, "BadRequest", message)
}

fn deny(request: &AdmissionRequest<DynamicObject>, code: u16, reason: &str, message: String) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request).deny(message);
    response.result.code = code;
    response.result.reason = reason.into();
    response
}

/// Reads the request's object (or old object) as `T`; a denial says what is unreadable.
fn parse<T: DeserializeOwned + Serialize>(
    request: &AdmissionRequest<DynamicObject>,
    object: Option<&DynamicObject>,
    what: &str,
) -> Result<T, Box<AdmissionResponse>> {
    let Some(object) = object else {
        return Err(Box::new(deny(request, 400, "BadRequest", format!("the admission request carries no {what}"))));
    };
    let unreadable = |problem: String| {
        let message = format!("the {what} cannot be read as a {}: {problem}", request.kind.kind);
        Box::new(deny(request, 422, "Invalid", message))
    };
    let value = serde_json::to_value(object).map_err(|e| Box::new(deny(request, 400, "BadRequest", e.to_string())))?;
    // The path of the field that does not fit goes first: serde_json's own message names none.
    let typed: T = serde_path_to_error::deserialize(value.clone()).map_err(|e| match e.path().to_string() {
        path if path == "." => unreadable(e.into_inner().to_string()),
        path => unreadable(format!("{path}: {}", e.into_inner())),
    })?;
    match shape_mismatch(&serde_json::to_value(&typed).expect("typed objects serialise"), &value, "") {
        Some(problem) => Err(unreadable(problem)),
        None => Ok(typed),
    }
}

/// Where `raw` is a list but its typed view an object: serde reads a list as a struct of our own
/// (`spec: []` is an empty spec), which the API server's schema refuses and a patch cannot
/// address. Scalars are left alone (a quantity may be a number or a string).
fn shape_mismatch(typed: &serde_json::Value, raw: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    let field = |key: &str| if at.is_empty() { key.to_owned() } else { format!("{at}.{key}") };
    match (typed, raw) {
        (Value::Object(t), Value::Object(r)) => {
            t.iter().find_map(|(k, tv)| r.get(k).and_then(|rv| shape_mismatch(tv, rv, &field(k))))
        }
        (Value::Array(t), Value::Array(r)) => {
            t.iter().zip(r).enumerate().find_map(|(i, (tv, rv))| shape_mismatch(tv, rv, &format!("{at}[{i}]")))
        }
        (Value::Object(_), Value::Array(_)) => Some(format!("{at}: invalid type: sequence, expected a map")),
        _ => None,
    }
}

/// The patch that turns `before` into `after`, both read through the typed view: unknown fields
/// are in neither, so the patch never touches them.
fn patch_between<T: Serialize>(before: &T, after: &T) -> json_patch::Patch {
    let before = serde_json::to_value(before).expect("typed objects serialise");
    let after = serde_json::to_value(after).expect("typed objects serialise");
    json_patch::diff(&before, &after)
}

/// The mutating webhook: fills in defaults.
pub fn mutate(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    mutate_with(request, None)
}

/// As [`mutate`], and a new job in a queue that sends its Workloads through MultiKueue (as
/// `queues` know them) is given `spec.managedBy` for it, unless it names who runs it itself.
pub fn mutate_with(request: &AdmissionRequest<DynamicObject>, queues: Option<&Queues>) -> AdmissionResponse {
    if matches!(request.operation, Operation::Delete | Operation::Connect) {
        return AdmissionResponse::from(request);
    }
    let patch = match kind_of(request) {
        None => return unsupported(request),
        Some(Kind::DIJob) => match parse::<DIJob>(request, request.object.as_ref(), "object") {
            Ok(job) => {
                let mut defaulted = job.clone();
                default_dijob(&mut defaulted);
                if let Some(queues) = queues.filter(|_| request.operation == Operation::Create) {
                    dispatch_through(&mut defaulted, request.namespace.as_deref().unwrap_or_default(), queues);
                }
                patch_between(&job, &defaulted)
            }
            Err(denial) => return *denial,
        },
        Some(Kind::AggregatorConfig) => match parse::<AggregatorConfig>(request, request.object.as_ref(), "object") {
            Ok(config) => {
                let mut defaulted = config.clone();
                default_aggregator_config(&mut defaulted);
                patch_between(&config, &defaulted)
            }
            Err(denial) => return *denial,
        },
    };
    let response = AdmissionResponse::from(request);
    if patch.0.is_empty() {
        return response;
    }
    match response.with_patch(patch) {
        Ok(r) => r,
        Err(e) => deny(request, 500, "InternalError", format!("cannot encode the defaults as a patch: {e}")),
    }
}

/// Gives `job` to MultiKueue when its queue sends Workloads through it; not a copy MultiKueue
/// made on a worker, nor a job that says who runs it.
fn dispatch_through(job: &mut DIJob, namespace: &str, queues: &Queues) {
    if job.spec.managed_by.is_some() || job.prebuilt_workload().is_some() {
        return;
    }
    if job.queue_name().is_some_and(|queue| queues.dispatches(namespace, queue)) {
        job.spec.managed_by = Some(di_api::contract::kueue::MULTIKUEUE.into());
    }
}

/// Refuses a new job whose names another job of its namespace claims already.
fn unclaimed(
    request: &AdmissionRequest<DynamicObject>,
    job: &DIJob,
    claims: Option<&Claims>,
) -> Result<(), ValidationErrors> {
    let (Some(claims), Some(namespace)) = (claims, request.namespace.as_deref()) else { return Ok(()) };
    // The object's own name first: the request's is empty for a `generateName` create.
    let name = job.metadata.name.as_deref().filter(|n| !n.is_empty()).unwrap_or(&request.name);
    if name.is_empty() {
        return Ok(());
    }
    let shared = match claims.shared_with_others(namespace, name, job) {
        Some(shared) if !shared.is_empty() => shared,
        _ => return Ok(()),
    };
    let named: Vec<String> = shared.iter().map(|(name, other)| format!("{name} (job {other}'s)")).collect();
    let message = format!(
        "Invalid value: {:?}: its pods and Services would take names another job of the namespace takes: {}; \
         rename this job (or its tasks)",
        name,
        named.join(", ")
    );
    Err(ValidationErrors(vec![di_api::FieldError { path: "metadata.name".into(), message }]))
}

/// The validating webhook: refuses what would fail later, naming each field and its fix.
pub fn validate(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    validate_against(request, None)
}

/// As [`validate`], and a new job whose pods or Services would take names another job of its
/// namespace claims is refused too, naming them (when `claims` has listed the jobs).
pub fn validate_against(request: &AdmissionRequest<DynamicObject>, claims: Option<&Claims>) -> AdmissionResponse {
    if matches!(request.operation, Operation::Delete | Operation::Connect) {
        return AdmissionResponse::from(request);
    }
    let mut warnings = vec![];
    let outcome: Result<(), ValidationErrors> = match kind_of(request) {
        None => return unsupported(request),
        Some(Kind::DIJob) => {
            // Checked as stored: the defaults are filled in whether or not the mutating
            // webhook ran first (defaulting is idempotent).
            let mut job = match parse::<DIJob>(request, request.object.as_ref(), "object") {
                Ok(job) => job,
                Err(denial) => return *denial,
            };
            default_dijob(&mut job);
            warnings = di_api::validation::warnings(&job);
            if request.operation == Operation::Update {
                match parse::<DIJob>(request, request.old_object.as_ref(), "old object") {
                    Ok(mut old) => {
                        default_dijob(&mut old);
                        // A write that leaves the spec alone (labels, finalizers: the garbage
                        // collector's, through whichever version it prefers) is refused only
                        // for moving a running job between queues.
                        if old.spec == job.spec {
                            validate_dijob_metadata_update(&old, &job)
                        } else {
                            validate_dijob_update(&old, &job)
                        }
                    }
                    Err(denial) => return *denial,
                }
            } else {
                // Either version holds either form: the API server returns a role job under
                // v2alpha1, its preferred version, so an export of it must apply again as read.
                validate_dijob(&job).and_then(|()| unclaimed(request, &job, claims))
            }
        }
        Some(Kind::AggregatorConfig) => match parse::<AggregatorConfig>(request, request.object.as_ref(), "object") {
            Ok(mut config) => {
                default_aggregator_config(&mut config);
                validate_aggregator_config(&config)
            }
            Err(denial) => return *denial,
        },
    };
    match outcome {
        Ok(()) => {
            let mut response = AdmissionResponse::from(request);
            response.warnings = (!warnings.is_empty()).then_some(warnings);
            response
        }
        Err(errors) => deny(request, 422, "Invalid", errors.to_string()),
    }
}
