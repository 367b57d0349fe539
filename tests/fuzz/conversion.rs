//! The conversion webhook: generated ConversionReviews. Valid objects of every kind, as
//! `v1alpha4` and converted into the older served versions, spoilt field by field (anywhere,
//! `apiVersion` and `kind` included; pruned as the apiserver prunes) and asked for in
//! every served version; and random bytes and JSON. Always a 200 and a review; a failed conversion names its object and what it could
//! not convert; what converts, converts back to the very object it came from.

use super::admission::{object, spec};
use super::*;
use axum::body::Body;
use axum::http::Request;
use capms::conversion::{SERVED_VERSIONS, convert, review};
use capms::webhooks::AdmittedKind;
use serde_json::{Value, json};
use tower::ServiceExt;

fn api_version(version: &str) -> String {
    format!("{}/{version}", capms::api::common::GROUP)
}

/// The review the apiserver sends to have `objects` in `desired`.
fn conversion_review(desired: &str, objects: &[Value]) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
           "request": {"uid": "5e1f7a2c-0000-4000-8000-000000000001", "desiredAPIVersion": desired,
                       "objects": objects}})
}

/// The HTTP status and the review `/convert` answers.
async fn call(body: Vec<u8>) -> (u16, Value) {
    let request = Request::post(review::PATH)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    let response = review::router().oneshot(request).await.expect("infallible");
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    let out = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, out)
}

/// A failed conversion says which object and what about it.
fn names_what_failed(message: &str) -> bool {
    let what = [
        "apiVersion",
        "kind",
        " requires ",
        " must be an object",
        "annotation ",
    ];
    message.starts_with("cannot convert ") && what.iter().any(|w| message.contains(w))
}

/// `object` as the apiserver would store it (and so hand to a conversion): pruned by the schema
/// of its kind and version, which drops what the schema does not know and every null (no field of
/// capms's is nullable). An object of no served kind and version is left as it is.
fn stored(mut object: Value) -> Value {
    let kind = object["kind"].as_str().unwrap_or_default();
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let key = (
        kind.to_owned(),
        api_version
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned(),
    );
    let schema = schemas().get(&key);
    if let (Some(schema), Some(map)) = (schema, object.as_object_mut()) {
        // The apiserver keeps type and object metadata itself; the schema prunes the rest.
        let own = ["apiVersion", "kind", "metadata"];
        let mut rest = Value::Object(
            map.iter()
                .filter(|(k, _)| !own.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
        map.retain(|k, _| own.contains(&k.as_str()));
        prune(&mut rest, schema);
        if let Value::Object(rest) = rest {
            map.extend(rest);
        }
    }
    if let Some(map) = object.as_object_mut() {
        map.entry("metadata").or_insert_with(|| json!({}));
    }
    object
}

/// The schema of `kind` in `version` (`v1alpha4`), as capms's CRDs serve it.
pub(super) fn schema(kind: &str, version: &str) -> &'static Value {
    schemas()
        .get(&(kind.to_owned(), version.to_owned()))
        .unwrap_or_else(|| panic!("no schema of {kind} {version}"))
}

/// The schema of every kind and version capms serves, by kind and version.
fn schemas() -> &'static std::collections::HashMap<(String, String), Value> {
    static SCHEMAS: std::sync::OnceLock<std::collections::HashMap<(String, String), Value>> =
        std::sync::OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut schemas = std::collections::HashMap::new();
        for crd in capms::api::crds() {
            for version in &crd.spec.versions {
                let schema = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref());
                let schema = serde_json::to_value(schema).expect("schema");
                schemas.insert((crd.spec.names.kind.clone(), version.name.clone()), schema);
            }
        }
        schemas
    })
}

fn prune(value: &mut Value, schema: &Value) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                map.retain(|k, v| !v.is_null() && properties.contains_key(k));
                map.iter_mut().for_each(|(k, v)| prune(v, &properties[k]));
            } else if let Some(additional) = schema.get("additionalProperties") {
                map.retain(|_, v| !v.is_null());
                map.values_mut().for_each(|v| prune(v, additional));
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                items.iter_mut().for_each(|v| prune(v, item));
            }
        }
        _ => {}
    }
}

/// Has `object` every field its own `version` requires?
fn complete(object: &Value, version: &str) -> bool {
    let kind = object["kind"].as_str().unwrap_or_default();
    let (Some(kind), Some(schema)) = (
        capms::conversion::kinds::ConvertedKind::named(kind),
        capms::conversion::Schema::of(version),
    ) else {
        return false;
    };
    kind.required(schema)
        .iter()
        .all(|field| object.pointer(field).is_some())
}

/// A valid object of `kind` in `version`.
fn valid(kind: AdmittedKind, version: &str) -> Value {
    let mut object = object(kind, spec(kind));
    if kind == AdmittedKind::FirewallTemplate && version == "v1alpha1" {
        // The Go provider's template needs its partition and project, which capms's has not.
        object["apiVersion"] = json!(api_version(version));
        object["spec"] = json!({"image": "firewall-ubuntu-3.0", "size": "v1-small-x86",
            "networks": ["internet-mini-lab"], "partition": "mini-lab", "project": PROJECT,
            "initialRuleSet": {"egress": [{"protocol": "TCP", "ports": [443], "to": ["0.0.0.0/0"]}]}});
        return object;
    }
    convert(&object, &api_version(version)).expect("a valid object converts")
}

#[tokio::test]
async fn spoilt_objects_convert_back_unchanged_or_are_refused_naming_what() {
    let mut rng = rng(0xC0_1E27);
    // The kinds served in more than one version.
    let kinds: Vec<AdmittedKind> = AdmittedKind::ALL
        .into_iter()
        .filter(|k| capms::conversion::kinds::ConvertedKind::named(k.name()).is_some())
        .collect();
    let (mut converted, mut refused) = (0, 0);
    // Per kind and pair of versions: (converted, cases).
    let mut pairs = std::collections::BTreeMap::<(&str, &str, &str), (usize, usize)>::new();
    for _ in 0..cases() {
        let kind = kinds[rng.random_range(0..kinds.len())];
        let from = SERVED_VERSIONS[rng.random_range(0..SERVED_VERSIONS.len())];
        let to = SERVED_VERSIONS[rng.random_range(0..SERVED_VERSIONS.len())];
        let good = valid(kind, from);
        let under = match rng.random_bool(0.8) {
            true => vec![PathSegment::Key("spec".into())],
            false => vec![],
        };
        let bad = stored(spoilt(&mut rng, &good, &under));
        let body = conversion_review(&api_version(to), std::slice::from_ref(&bad));
        let (status, out) = call(serde_json::to_vec(&body).expect("json")).await;
        assert_eq!(status, 200, "/convert answered {status} to {body}");
        let pair = pairs.entry((kind.name(), from, to)).or_default();
        pair.1 += 1;
        match out["response"]["result"]["status"].as_str() {
            Some("Success") => {
                converted += 1;
                pair.0 += 1;
                let there = &out["response"]["convertedObjects"][0];
                assert_eq!(there["apiVersion"], json!(api_version(to)), "{out}");
                match convert(there, &api_version(from)) {
                    Ok(back) => assert_eq!(back, bad, "lost on the way to {to} and back: {there}"),
                    // An object that lacked what its own version requires (the apiserver
                    // refuses to store such) may be refused on the way back, naming the field.
                    Err(e) if !complete(&bad, from) => {
                        assert!(names_what_failed(&e.to_string()), "{e}");
                    }
                    Err(e) => panic!("{there} does not convert back to {from}: {e}"),
                }
            }
            Some("Failure") => {
                refused += 1;
                let message = out["response"]["result"]["message"]
                    .as_str()
                    .unwrap_or_default();
                assert!(
                    names_what_failed(message),
                    "a refusal naming nothing: {message:?}\nfor {body}"
                );
            }
            _ => panic!("no verdict: {out}\nfor {body}"),
        }
    }
    eprintln!(
        "spoilt objects: {converted} converted and back unchanged, {refused} refused naming what"
    );
    assert!(converted > 0 && refused > 0);
    // Many spoilt objects still convert (a spoilt field is often one conversion passes on):
    // a conversion refusing one kind or pair of versions outright fails here.
    assert_eq!(
        pairs.len(),
        kinds.len() * SERVED_VERSIONS.len().pow(2),
        "{pairs:?}"
    );
    for (pair, (converted, cases)) in pairs {
        assert!(
            converted * 4 >= cases,
            "{pair:?}: only {converted} of {cases} spoilt objects converted"
        );
    }
}

#[tokio::test]
async fn random_bytes_and_json_are_answered_without_a_panic_or_a_5xx() {
    let mut rng = rng(0xC0_4A4D);
    for i in 0..cases() {
        let body = match i % 3 {
            0 => (0..rng.random_range(0..200))
                .map(|_| rng.random::<u8>())
                .collect(),
            1 => serde_json::to_vec(&random_json(&mut rng, 0)).expect("json"),
            _ => {
                let objects: Vec<Value> = (0..rng.random_range(0..3))
                    .map(|_| random_json(&mut rng, 1))
                    .collect();
                let to = SERVED_VERSIONS[rng.random_range(0..SERVED_VERSIONS.len())];
                serde_json::to_vec(&conversion_review(&api_version(to), &objects)).expect("json")
            }
        };
        let (status, out) = call(body).await;
        assert_eq!(status, 200, "/convert answered {status} to input {i}");
        assert!(
            out["response"]["result"]["status"].is_string(),
            "no verdict for input {i}: {out}"
        );
    }
}
