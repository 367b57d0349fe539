//! Objects as the webhooks read them: decoded into capms's types, and when they do not fit,
//! every field that does not, each named by its path. Each misfit field is taken out and the
//! rest decoded again, so that one wrong field does not hide the others, and so that the rules
//! can still judge what is left.

use super::rules::FieldError;
use kube::CustomResourceExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// More misfits than this in one object are not worth listing.
const MAX_MISFITS: usize = 16;

/// Why an object does not fit its type.
#[derive(Debug)]
pub(crate) struct Misfit {
    pub errors: Vec<FieldError>,
    /// The object without its misfit fields, when that fits and no array lost an element (the
    /// rules would name the elements after it by indices that are not the user's).
    pub rest: Option<Value>,
}

impl Misfit {
    pub fn message(&self) -> String {
        let errors = self.errors.iter().map(ToString::to_string);
        errors.collect::<Vec<_>>().join("; ")
    }
}

/// `raw` as a `T`, or every field of it that does not fit.
pub fn decode<T: DeserializeOwned + CustomResourceExt>(raw: &Value) -> Result<T, Misfit> {
    let misshapen = lists_for_objects(raw, &schema_of::<T>());
    if !misshapen.is_empty() {
        return Err(Misfit {
            errors: misshapen,
            rest: None,
        });
    }
    let first = match serde_path_to_error::deserialize::<_, T>(raw) {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    let mut value = raw.clone();
    let mut errors = Vec::new();
    // Where fields were taken out, as the object stood then: later paths are told as the
    // object came, not as it stands after array elements were taken out.
    let mut taken: Vec<Vec<Segment>> = Vec::new();
    let mut next = Some(first);
    while let Some(error) = next.take() {
        let now: Vec<Segment> = error.path().iter().cloned().collect();
        let segments = as_it_came(now.clone(), &taken);
        let message = error.inner().to_string();
        // A missing field cannot be taken out: there is nothing to decode the rest without. One
        // missing because it was taken out has been named already.
        if let Some(field) = missing_field(&message) {
            let mut missing = now.clone();
            missing.push(Segment::Map {
                key: field.to_owned(),
            });
            if !taken.iter().any(|t| same_path(t, &missing)) {
                errors.push(field_error(
                    &segments,
                    Some(field),
                    "is required".to_owned(),
                ));
            }
            return Err(Misfit { errors, rest: None });
        }
        errors.push(field_error(&segments, None, message));
        if errors.len() >= MAX_MISFITS || !take_out(&mut value, &now) {
            return Err(Misfit { errors, rest: None });
        }
        taken.push(now);
        match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(_) => {
                let shifted = taken
                    .iter()
                    .any(|t| matches!(t.last(), Some(Segment::Seq { .. })));
                let rest = (!shifted).then_some(value);
                return Err(Misfit { errors, rest });
            }
            Err(e) => next = Some(e),
        }
    }
    Err(Misfit { errors, rest: None })
}

/// `T`'s schema as its CRD serves it, made once per kind.
fn schema_of<T: CustomResourceExt>() -> Arc<Value> {
    static SCHEMAS: OnceLock<Mutex<HashMap<String, Arc<Value>>>> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(Mutex::default);
    let mut schemas = schemas.lock().unwrap_or_else(|p| p.into_inner());
    schemas
        .entry(T::crd_name().to_owned())
        .or_insert_with(|| {
            let crd = T::crd();
            let schema = crd.spec.versions.first().and_then(|v| v.schema.as_ref());
            let schema = schema.and_then(|s| s.open_api_v3_schema.as_ref());
            Arc::new(serde_json::to_value(schema).unwrap_or_default())
        })
        .clone()
}

/// The fields of `value` holding a list where `schema` has an object. serde reads such a list as
/// the object's fields in their order and names each by its index (`spec.firewallSpec[0]`), a
/// field the object has not; these are named as the object's field instead.
fn lists_for_objects(value: &Value, schema: &Value) -> Vec<FieldError> {
    let mut found = Vec::new();
    shapes(value, schema, String::new(), &mut found);
    found
}

fn shapes(value: &Value, schema: &Value, path: String, found: &mut Vec<FieldError>) {
    match value {
        Value::Array(_) if schema.get("properties").is_some() => found.push(FieldError {
            path,
            message: "invalid type: sequence, expected an object".to_owned(),
        }),
        Value::Array(items) => {
            let Some(each) = schema.get("items") else {
                return;
            };
            for (i, item) in items.iter().enumerate() {
                shapes(item, each, format!("{path}[{i}]"), found);
            }
        }
        Value::Object(fields) => {
            let properties = schema.get("properties");
            for (name, field) in fields {
                let below = properties
                    .and_then(|p| p.get(name))
                    .or_else(|| schema.get("additionalProperties"));
                if let Some(below) = below {
                    let path = if path.is_empty() {
                        name.clone()
                    } else {
                        format!("{path}.{name}")
                    };
                    shapes(field, below, path, found);
                }
            }
        }
        _ => {}
    }
}

fn same(a: &Segment, b: &Segment) -> bool {
    match (a, b) {
        (Segment::Seq { index: i }, Segment::Seq { index: j }) => i == j,
        (Segment::Map { key: k }, Segment::Map { key: l }) => k == l,
        (Segment::Enum { variant: v }, Segment::Enum { variant: w }) => v == w,
        _ => false,
    }
}

fn same_path(a: &[Segment], b: &[Segment]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
}

/// `path` in the object as it came, given the fields `taken` out before (each as the object
/// stood then): past every array element taken out before it, an index counts one more.
fn as_it_came(mut path: Vec<Segment>, taken: &[Vec<Segment>]) -> Vec<Segment> {
    for removed in taken.iter().rev() {
        let Some((Segment::Seq { index: gone }, parent)) = removed.split_last() else {
            continue;
        };
        let below = path.len() > parent.len() && parent.iter().zip(&path).all(|(a, b)| same(a, b));
        if let (true, Some(Segment::Seq { index })) = (below, path.get_mut(parent.len()))
            && *index >= *gone
        {
            *index += 1;
        }
    }
    path
}

/// serde's "missing field `name`": the field's name.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.strip_suffix('`')
}

/// The error at `segments` (and `field` below it), as the webhooks word field errors:
/// `spec.rules.egress[0].protocol`.
fn field_error(segments: &[Segment], field: Option<&str>, message: String) -> FieldError {
    let mut path = String::new();
    let names = segments.iter().map(|s| match s {
        Segment::Seq { index } => format!("[{index}]"),
        Segment::Map { key } => key.clone(),
        Segment::Enum { variant } => variant.clone(),
        Segment::Unknown => "?".to_owned(),
    });
    for name in names.chain(field.map(str::to_owned)) {
        if !path.is_empty() && !name.starts_with('[') {
            path.push('.');
        }
        path.push_str(&name);
    }
    if path.is_empty() {
        path.push('.');
    }
    FieldError { path, message }
}

/// Takes the value at `segments` out of `value`: a key from its object, an element from its
/// array. False when there is no such value.
fn take_out(value: &mut Value, segments: &[Segment]) -> bool {
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut at = value;
    for segment in parents {
        let next = match (segment, at) {
            (Segment::Map { key }, Value::Object(o)) => o.get_mut(key),
            (Segment::Seq { index }, Value::Array(a)) => a.get_mut(*index),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    match (last, at) {
        (Segment::Map { key }, Value::Object(o)) => o.remove(key).is_some(),
        (Segment::Seq { index }, Value::Array(a)) if *index < a.len() => {
            a.remove(*index);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MetalStackCluster;
    use serde_json::json;

    fn cluster(rules: Value, project: &str) -> Value {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
            "metadata": {"name": "c"},
            "spec": {"partition": "mini-lab", "projectID": project,
                     "firewallSpec": {"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86", "rules": rules}}})
    }

    #[test]
    fn every_misfit_field_is_named_and_the_rest_still_decodes() {
        let rules = json!({"egress": [
            {"protocol": "icmp", "ports": [443], "to": ["0.0.0.0/0"]},
            {"protocol": "tcp", "ports": ["https", 22, "ssh"], "to": ["0.0.0.0/0"]}]});
        let Err(misfit) = decode::<MetalStackCluster>(&cluster(rules, "p")) else {
            panic!("decoded")
        };
        let paths: Vec<&str> = misfit.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.firewallSpec.rules.egress[0].protocol",
                "spec.firewallSpec.rules.egress[1].ports[0]",
                "spec.firewallSpec.rules.egress[1].ports[2]"
            ],
            "{misfit:?}"
        );
        assert!(misfit.errors[0].message.contains("`tcp`"), "{misfit:?}");
        assert!(
            misfit.rest.is_none(),
            "ports lost elements: the rules are not asked"
        );

        let rules = json!({"egress": [{"protocol": "icmp", "ports": [443], "to": ["0.0.0.0/0"]}]});
        let Err(misfit) = decode::<MetalStackCluster>(&cluster(rules, "p")) else {
            panic!("decoded")
        };
        let rest = misfit.rest.expect("the rest decodes");
        assert!(decode::<MetalStackCluster>(&rest).is_ok());
    }

    #[test]
    fn a_required_field_of_the_wrong_type_is_named_once() {
        let mut raw = cluster(json!(null), "p");
        raw["spec"]["partition"] = json!(5);
        let Err(misfit) = decode::<MetalStackCluster>(&raw) else {
            panic!("decoded")
        };
        assert_eq!(misfit.errors.len(), 1, "{misfit:?}");
        assert_eq!(misfit.errors[0].path, "spec.partition");
    }

    #[test]
    fn a_list_where_an_object_belongs_is_named_as_that_field() {
        let mut raw = cluster(json!(null), "p");
        raw["spec"]["firewallSpec"] = json!([30643, 28944, null]);
        let Err(misfit) = decode::<MetalStackCluster>(&raw) else {
            panic!("decoded")
        };
        assert_eq!(
            misfit.message(),
            "spec.firewallSpec: invalid type: sequence, expected an object"
        );
    }

    #[test]
    fn a_missing_field_is_named_below_its_object() {
        let mut raw = cluster(json!(null), "p");
        raw["spec"].as_object_mut().map(|s| s.remove("partition"));
        let Err(misfit) = decode::<MetalStackCluster>(&raw) else {
            panic!("decoded")
        };
        assert_eq!(misfit.message(), "spec.partition: is required");
        assert!(misfit.rest.is_none());
    }
}
