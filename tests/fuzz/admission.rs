//! The admission handlers: generated AdmissionReviews for every webhook.

use super::*;
use axum::body::Body;
use axum::http::Request;
use capms::cache::catalog::CatalogCache;
use capms::webhooks::{Kind, Route, WebhookState, router, routes};
use serde_json::{Value, json};
use tower::ServiceExt;

fn state() -> WebhookState {
    let metal = metal_api::Client::new(metal_api::Config::new(
        url::Url::parse("http://127.0.0.1:9/").expect("url"),
        metal_api::Auth::None,
    ))
    .expect("client");
    WebhookState {
        client: None,
        caches: Default::default(),
        catalog: CatalogCache::with_catalog(metal, lab().catalog()),
        deny_when_metal_unreachable: false,
        metrics: Default::default(),
    }
}

fn firewall_spec() -> Value {
    json!({"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86", "networks": ["internet-mini-lab"],
           "rules": {"egress": [{"protocol": "tcp", "ports": [443], "to": ["0.0.0.0/0"], "comment": "https"}],
                     "ingress": [{"protocol": "udp", "ports": [53], "from": ["127.100.0.0/24"]}]}})
}

/// A valid spec of `kind`, with every field capms knows set.
pub(super) fn spec(kind: Kind) -> Value {
    let cluster = json!({"partition": "mini-lab", "projectID": PROJECT, "publicNetworkID": "internet-mini-lab",
        "controlPlaneEndpoint": {"host": "127.100.0.9", "port": 6443}, "firewallSpec": firewall_spec()});
    let machine =
        json!({"image": "ubuntu-26.4", "machineType": "v1-small-x86", "partition": "mini-lab"});
    let template =
        |spec: Value| json!({"template": {"metadata": {"labels": {"team": "a"}}, "spec": spec}});
    match kind {
        Kind::Cluster => cluster,
        Kind::ClusterTemplate => template(cluster),
        Kind::Firewall => firewall_spec(),
        Kind::FirewallTemplate => template(firewall_spec()),
        Kind::Machine => machine,
        Kind::MachineTemplate => template(machine),
    }
}

pub(super) fn object(kind: Kind, spec: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": kind.name(),
           "metadata": {"name": "fuzz", "namespace": "default", "uid": "0d9c1b7e-0000-4000-8000-000000000001"},
           "spec": spec})
}

/// The review the apiserver sends for `object`, asked for as `version`.
fn review(kind: Kind, version: &str, op: &str, object: Value, old: Option<Value>) -> Value {
    let group = "infrastructure.cluster.x-k8s.io";
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "3c5d7c1e-0000-4000-8000-000000000001",
            "kind": {"group": group, "version": "v1alpha4", "kind": kind.name()},
            "resource": {"group": group, "version": "v1alpha4", "resource": kind.plural()},
            "requestKind": {"group": group, "version": version, "kind": kind.name()},
            "name": "fuzz", "namespace": "default", "operation": op,
            "userInfo": {"username": "fuzz"}, "object": object, "oldObject": old, "dryRun": false}})
}

/// The HTTP status and the review the handler answers.
async fn call(state: &WebhookState, route: Route, body: Vec<u8>) -> (u16, Value) {
    let request = Request::post(route.path())
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    let response = router(state.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Does `message` begin with a field path (`spec.rules.egress[0].ports[1]: …`)?
fn names_a_field(message: &str) -> bool {
    let Some((path, _)) = message.split_once(": ") else {
        return false;
    };
    let field = |c: char| c.is_ascii_alphanumeric() || "._[]-/".contains(c);
    !path.is_empty() && path.chars().all(field)
}

#[tokio::test]
async fn spoilt_objects_of_every_kind_are_answered_and_every_denial_names_a_field() {
    capms::tls::install_default_provider();
    let state = state();
    let routes = routes();
    let mut rng = rng(0xAD_0155);
    let (mut allowed, mut denied) = (0, 0);
    for _ in 0..cases() {
        let route = routes[rng.random_range(0..routes.len())];
        let valid = object(route.kind, spec(route.kind));
        let bad = spoilt(&mut rng, &valid, &[Step::Key("spec".into())]);
        let version = ["v1alpha4", "v1alpha1"][rng.random_range(0..2)];
        let body = match rng.random_bool(0.5) {
            true => review(route.kind, version, "CREATE", bad, None),
            false => review(route.kind, version, "UPDATE", bad, Some(valid)),
        };
        let (status, out) = call(&state, route, serde_json::to_vec(&body).expect("json")).await;
        assert_eq!(status, 200, "{} answered {status} to {body}", route.path());
        match out["response"]["allowed"].as_bool() {
            Some(true) => allowed += 1,
            Some(false) => {
                denied += 1;
                let message = out["response"]["status"]["message"]
                    .as_str()
                    .unwrap_or_default();
                assert!(
                    names_a_field(message),
                    "{}: a denial naming no field: {message:?}\nfor {body}",
                    route.path()
                );
            }
            None => panic!("{} gave no verdict: {out}", route.path()),
        }
    }
    eprintln!("spoilt objects: {allowed} admitted, {denied} denied naming a field");
    assert!(allowed > 0 && denied > 0);
}

#[tokio::test]
async fn random_bytes_and_json_are_answered_without_a_panic_or_a_5xx() {
    capms::tls::install_default_provider();
    let state = state();
    let routes = routes();
    let mut rng = rng(0xCA9_5EED);
    for i in 0..cases() {
        let route = routes[i % routes.len()];
        let body = match i % 3 {
            0 => (0..rng.random_range(0..200))
                .map(|_| rng.random::<u8>())
                .collect(),
            1 => serde_json::to_vec(&random_json(&mut rng, 0)).expect("json"),
            _ => {
                let object = object(route.kind, random_json(&mut rng, 1));
                let op = ["CREATE", "UPDATE", "DELETE", "CONNECT"][rng.random_range(0..4)];
                let review = review(route.kind, "v1alpha4", op, object.clone(), Some(object));
                serde_json::to_vec(&review).expect("json")
            }
        };
        let (status, out) = call(&state, route, body).await;
        assert_eq!(
            status,
            200,
            "{} answered {status} to input {i}",
            route.path()
        );
        assert!(
            out["response"]["allowed"].is_boolean(),
            "{} gave no verdict: {out}",
            route.path()
        );
    }
}
