//! Reading a pod template the way the contract does: which container is the replica's own, which
//! port it serves on, how many GPUs it asks for, and what that makes a job's logic learners.

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::contract::{DEFAULT_CONTAINER_NAME, GPU_RESOURCE, PORT_NAME, Role};
use crate::dijob::DIJob;

/// Index of the container the contract applies to: the one named `di-container`, else the first.
pub fn main_container_index(spec: &PodSpec) -> Option<usize> {
    if spec.containers.is_empty() {
        return None;
    }
    Some(spec.containers.iter().position(|c| c.name == DEFAULT_CONTAINER_NAME).unwrap_or(0))
}

pub fn main_container(template: &PodTemplateSpec) -> Option<&Container> {
    let spec = template.spec.as_ref()?;
    main_container_index(spec).map(|i| &spec.containers[i])
}

/// The number of the pod's `di-port`: the first container port of that name, the main
/// container's first, since that is the one the replica's Service points at.
pub fn di_port(spec: &PodSpec) -> Option<i32> {
    let main = main_container_index(spec).unwrap_or(0);
    let ordered = spec.containers.get(main).into_iter().chain(spec.containers.iter());
    ordered
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(PORT_NAME))
        .map(|p| p.container_port)
}

/// The port a replica of `role` built from `template` serves on: its [`di_port`], else the
/// role's default.
pub fn replica_port(template: &PodTemplateSpec, role: Role) -> i32 {
    template.spec.as_ref().and_then(di_port).unwrap_or(role.default_port())
}

/// GPUs the template's main container asks for (its limit, else its request). `None` when it
/// asks for none; `Err` carries the quantity when it is not a whole number.
pub fn template_gpus(template: &PodTemplateSpec) -> Result<Option<i64>, String> {
    let Some(resources) = main_container(template).and_then(|c| c.resources.as_ref()) else {
        return Ok(None);
    };
    let quantity = resources
        .limits
        .as_ref()
        .and_then(|l| l.get(GPU_RESOURCE))
        .or_else(|| resources.requests.as_ref().and_then(|r| r.get(GPU_RESOURCE)));
    match quantity {
        None => Ok(None),
        Some(q) => whole_number(q).map(Some).ok_or_else(|| q.0.clone()),
    }
}

/// GPUs per logic learner: `spec.learner.gpus`, else its template's [`template_gpus`], else 0
/// (also for a job without learners). `Err` carries a template quantity that is no GPU count:
/// fractional, or beyond `i32` (validation bounds `spec.learner.gpus`, not the template).
pub fn learner_gpus(job: &DIJob) -> Result<i32, String> {
    let Some(learner) = &job.spec.learner else { return Ok(0) };
    if let Some(gpus) = learner.gpus {
        return Ok(gpus);
    }
    match template_gpus(&learner.template)? {
        None => Ok(0),
        Some(gpus) => i32::try_from(gpus).map_err(|_| gpus.to_string()),
    }
}

/// Whether each logic learner of the job is an aggregator in front of DDP learners: it has more
/// than one GPU. Not for a job whose GPU count cannot be read: it is invalid, and the reconciler
/// builds no learners for it at all.
pub fn needs_aggregator(job: &DIJob) -> bool {
    learner_gpus(job).is_ok_and(|gpus| gpus > 1)
}

/// The role the reconciler runs each logic learner of the job as (see [`needs_aggregator`]).
pub fn learner_role(job: &DIJob) -> Role {
    if needs_aggregator(job) { Role::Aggregator } else { Role::Learner }
}

/// A parsed Kubernetes quantity: `mantissa * 10^exp10`, binary suffixes already multiplied in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    pub mantissa: i128,
    pub exp10: i32,
}

/// Parses a quantity in Kubernetes' syntax (`2`, `500m`, `1.5Gi`, `3e2`); `None` if it is not one.
pub fn parse_quantity(q: &Quantity) -> Option<Decimal> {
    let s = q.0.trim();
    let number_end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || ((c == '-' || c == '+') && i == 0)))
        .map_or(s.len(), |(i, _)| i);
    let (number, suffix) = s.split_at(number_end);
    let (negative, digits) = match number.as_bytes().first()? {
        b'-' => (true, &number[1..]),
        b'+' => (false, &number[1..]),
        _ => (false, number),
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let mut mantissa: i128 = format!("{int_part}{frac_part}").parse().ok()?;
    let mut exp10 = -i32::try_from(frac_part.len()).ok()?;
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        b if BINARY.contains(&b) => {
            let power = BINARY.iter().position(|p| *p == b)? as u32 + 1;
            mantissa = mantissa.checked_mul(1024i128.checked_pow(power)?)?;
        }
        e if e.starts_with(['e', 'E']) => exp10 = exp10.checked_add(e[1..].parse::<i32>().ok()?)?,
        _ => return None,
    }
    Some(Decimal { mantissa: if negative { -mantissa } else { mantissa }, exp10 })
}

/// The value of a quantity when it is a whole number (`2`, `1k`, `2000m`, `1Ki`, `3e2`); `None`
/// when it is fractional or not a quantity at all.
pub fn whole_number(q: &Quantity) -> Option<i64> {
    let Decimal { mut mantissa, mut exp10 } = parse_quantity(q)?;
    if mantissa == 0 {
        // Zero at any exponent: the loops below would run once per power of ten, 2^31 times
        // for `0e2147483647`.
        return Some(0);
    }
    while exp10 > 0 {
        mantissa = mantissa.checked_mul(10)?;
        exp10 -= 1;
    }
    while exp10 < 0 {
        if mantissa % 10 != 0 {
            return None;
        }
        mantissa /= 10;
        exp10 += 1;
    }
    i64::try_from(mantissa).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers() {
        let cases = [
            ("2", Some(2)),
            ("0", Some(0)),
            ("0e2147483647", Some(0)),
            ("0e-2147483648", Some(0)),
            ("+3", Some(3)),
            ("-1", Some(-1)),
            ("1k", Some(1000)),
            ("2000m", Some(2)),
            ("1500m", None),
            ("0.5", None),
            ("1.0", Some(1)),
            (".5", None),
            ("1Ki", Some(1024)),
            ("3e2", Some(300)),
            ("5E-1", None),
            ("1x", None),
            ("", None),
            ("abc", None),
            ("1.", Some(1)),
            ("1e999999999999", None),
        ];
        for (input, want) in cases {
            assert_eq!(whole_number(&Quantity(input.into())), want, "quantity {input:?}");
        }
    }

    fn template(spec: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(serde_json::json!({ "spec": spec })).unwrap()
    }

    #[test]
    fn gpus_of_the_main_container() {
        let cases = [
            (serde_json::json!({"containers": [{"name": "c"}]}), Ok(None)),
            (
                serde_json::json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}),
                Ok(Some(2)),
            ),
            (
                serde_json::json!({"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}),
                Ok(Some(1)),
            ),
            (
                serde_json::json!({"containers": [
                    {"name": "sidecar", "resources": {"limits": {"nvidia.com/gpu": 1}}},
                    {"name": "di-container", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}),
                Ok(Some(4)),
            ),
            (
                serde_json::json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}),
                Err("0.5".to_string()),
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(template_gpus(&template(spec.clone())), want, "{spec}");
        }
        assert_eq!(template_gpus(&PodTemplateSpec::default()), Ok(None));
    }

    #[test]
    fn port_of_a_replica() {
        let cases = [
            (serde_json::json!({"containers": [{"name": "c"}]}), 22270),
            (
                serde_json::json!({"containers": [{"name": "c", "ports": [{"name": "di-port", "containerPort": 8000}]}]}),
                8000,
            ),
            (
                serde_json::json!({"containers": [
                    {"name": "a", "ports": [{"name": "di-port", "containerPort": 1}]},
                    {"name": "di-container", "ports": [{"name": "di-port", "containerPort": 2}]}]}),
                2,
            ),
            (
                serde_json::json!({"containers": [{"name": "c", "ports": [{"name": "other", "containerPort": 8000}]}]}),
                22270,
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(replica_port(&template(spec.clone()), Role::Collector), want, "{spec}");
        }
        assert_eq!(replica_port(&PodTemplateSpec::default(), Role::Coordinator), 22273);
        let spec = |containers| serde_json::from_value::<PodSpec>(serde_json::json!({ "containers": containers }));
        let sidecar_first = spec(serde_json::json!([
            {"name": "sidecar", "ports": [{"name": "di-port", "containerPort": 1}]},
            {"name": "di-container", "ports": [{"name": "other", "containerPort": 3}]}]));
        assert_eq!(di_port(&sidecar_first.unwrap()), Some(1), "another container's, when the main one has none");
        assert_eq!(di_port(&spec(serde_json::json!([])).unwrap()), None);
    }

    fn job(learner: serde_json::Value) -> DIJob {
        let spec = serde_json::json!({"coordinator": {"template": {}}, "learner": learner});
        serde_json::from_value(serde_json::json!({"metadata": {"name": "j"}, "spec": spec})).unwrap()
    }

    #[test]
    fn gpus_and_role_of_a_logic_learner() {
        // (what, spec.learner.gpus, the template's GPU limit, learner_gpus, role)
        let cases = [
            ("no GPUs anywhere", None, None, Ok(0), Role::Learner),
            ("one", None, Some("1"), Ok(1), Role::Learner),
            ("the template's", None, Some("2"), Ok(2), Role::Aggregator),
            ("the spec's", Some(3), None, Ok(3), Role::Aggregator),
            ("the spec's over the template's", Some(1), Some("4"), Ok(1), Role::Learner),
            ("fractional", None, Some("1.5"), Err("1.5".to_string()), Role::Learner),
            ("beyond i32", None, Some("3e9"), Err("3000000000".to_string()), Role::Learner),
        ];
        for (what, spec_gpus, template_gpus, want, role) in cases {
            let limits = template_gpus.map(|g| serde_json::json!({"nvidia.com/gpu": g}));
            let container = serde_json::json!({"name": "c", "resources": {"limits": limits}});
            let job = job(serde_json::json!({"gpus": spec_gpus, "template": {"spec": {"containers": [container]}}}));
            assert_eq!(learner_gpus(&job), want, "{what}");
            assert_eq!(needs_aggregator(&job), role == Role::Aggregator, "{what}");
            assert_eq!(learner_role(&job), role, "{what}");
        }
        let mut no_learner = job(serde_json::json!({"template": {}}));
        no_learner.spec.learner = None;
        assert_eq!((learner_gpus(&no_learner), learner_role(&no_learner)), (Ok(0), Role::Learner));
    }

    #[test]
    fn quantities() {
        for ok in ["0.5", "500m", "1.5Gi", "10Gi", "128Mi", "3", "1e3", "2E-2", "+1", "-1"] {
            assert!(parse_quantity(&Quantity(ok.into())).is_some(), "{ok} is a quantity");
        }
        for bad in ["", "Gi", "1.5 Gi", "ten", "1GB", "1e", "--1", "1..2"] {
            assert!(parse_quantity(&Quantity(bad.into())).is_none(), "{bad} is not a quantity");
        }
    }
}
