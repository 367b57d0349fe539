//! The admission handlers: generated AdmissionReviews for every webhook, answered with the
//! objects the rules read (the Cluster and MetalStackCluster a machine's partition comes from,
//! the firewall template a cluster names, the clusters and the Go provider's firewall
//! deployment using a changed template) held by a mock apiserver. Objects of the Go provider's
//! `v1alpha1` are written and spoilt in `v1alpha1`, then converted as the apiserver converts
//! them for the webhooks. Every denial begins with the path of a field of the object's schema,
//! in the version it was asked for.

use super::*;
use axum::body::Body;
use axum::http::Request;
use base64::Engine;
use capms::cache::catalog::CatalogCache;
use capms::cache::catalogs::Catalogs;
use capms::cache::credentials::MetalClients;
use capms::webhooks::{AdmittedKind, Route, WebhookState, router, routes};
use capms_test_support::RunningSim;
use capms_test_support::mock_apiserver::MockApiserver;
use serde_json::{Value, json};
use std::sync::Arc;
use tower::ServiceExt;

const V1ALPHA1: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

/// A typed object from its JSON.
fn typed<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("a valid object")
}

/// The objects admission reads, as a management cluster holds them: Cluster `fuzz` and its
/// MetalStackCluster, MetalStackCluster `templated` naming firewall template `edge`, that
/// template, and the Go provider's firewall deployment `fwd` naming it too.
fn management_cluster() -> MockApiserver {
    let api = MockApiserver::default();
    let meta =
        |name: &str| json!({"name": name, "namespace": "default", "uid": format!("uid-{name}")});
    api.put::<capms::capi::Cluster>(&typed(json!({"metadata": meta("fuzz"),
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": "fuzz"}}})));
    api.put::<capms::api::MetalStackCluster>(&typed(
        json!({"metadata": meta("fuzz"), "spec": spec(AdmittedKind::Cluster)}),
    ));
    let mut templated = spec(AdmittedKind::Cluster);
    templated["firewallSpec"] = Value::Null;
    templated["firewallTemplateRef"] = json!({"name": "edge"});
    api.put::<capms::api::MetalStackCluster>(&typed(
        json!({"metadata": meta("templated"), "spec": templated}),
    ));
    api.put::<capms::api::MetalStackFirewallTemplate>(&typed(
        json!({"metadata": meta("edge"), "spec": spec(AdmittedKind::FirewallTemplate)}),
    ));
    api.put::<capms::api::v1alpha1::MetalStackFirewallDeployment>(&typed(
        json!({"metadata": meta("fwd"),
        "spec": {"firewallTemplateRef": {"name": "edge"}}}),
    ));
    api
}

/// How old a catalog may grow (capms's default `--catalog-refresh`).
const REFRESH: std::time::Duration = std::time::Duration::from_secs(300);

/// The handlers' state, their catalog read from a simulator holding the lab (which must live as
/// long as the state is used).
async fn state(api: &MockApiserver) -> (WebhookState, RunningSim) {
    let metal = RunningSim::start(Inventory::default_lab(), "/metal").await;
    *metal.sim.state() = lab();
    let clients = Arc::new(MetalClients::new(metal.editor(), api.client()));
    let catalogs = Catalogs::new(CatalogCache::new(metal.editor(), REFRESH), clients, REFRESH);
    let state = WebhookState {
        client: api.client(),
        caches: Default::default(),
        catalogs,
        deny_when_metal_unreachable: false,
        metrics: Default::default(),
    };
    (state, metal)
}

fn firewall_spec() -> Value {
    json!({"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86", "networks": ["internet-mini-lab"],
           "rules": {"egress": [{"protocol": "tcp", "ports": [443], "to": ["0.0.0.0/0"], "comment": "https"}],
                     "ingress": [{"protocol": "udp", "ports": [53], "from": ["127.100.0.0/24"]}]}})
}

/// A valid spec of `kind`, with every field capms knows set.
pub(super) fn spec(kind: AdmittedKind) -> Value {
    let cluster = json!({"partition": "mini-lab", "projectID": PROJECT, "publicNetworkID": "internet-mini-lab",
        "controlPlaneEndpoint": {"host": "127.100.0.9", "port": 6443}, "firewallSpec": firewall_spec()});
    let machine =
        json!({"image": "ubuntu-26.4", "machineType": "v1-small-x86", "partition": "mini-lab"});
    let template =
        |spec: Value| json!({"template": {"metadata": {"labels": {"team": "a"}}, "spec": spec}});
    match kind {
        AdmittedKind::Cluster => cluster,
        AdmittedKind::ClusterTemplate => template(cluster),
        AdmittedKind::Firewall => firewall_spec(),
        AdmittedKind::FirewallTemplate => template(firewall_spec()),
        AdmittedKind::Machine => machine,
        AdmittedKind::MachineTemplate => template(machine),
    }
}

pub(super) fn object(kind: AdmittedKind, spec: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": kind.name(),
           "metadata": {"name": "fuzz", "namespace": "default", "uid": "0d9c1b7e-0000-4000-8000-000000000001"},
           "spec": spec})
}

/// A valid object of `kind` that makes admission read the management cluster: a machine
/// without a partition (its cluster's is taken), a cluster naming firewall template `edge` or
/// one there is not, template `edge` itself (which clusters and a deployment use).
fn reading(kind: AdmittedKind, rng: &mut StdRng) -> Value {
    let mut valid = object(kind, spec(kind));
    match kind {
        AdmittedKind::Machine | AdmittedKind::MachineTemplate => {
            valid["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "fuzz"});
            if rng.random_bool(0.5) {
                let at = if kind == AdmittedKind::Machine {
                    "/spec"
                } else {
                    "/spec/template/spec"
                };
                if let Some(spec) = valid.pointer_mut(at).and_then(Value::as_object_mut) {
                    spec.remove("partition");
                }
            }
        }
        AdmittedKind::Cluster if rng.random_bool(0.5) => {
            // A template there is, or one there is not (yet).
            let template = ["edge", "edge-to-come"][rng.random_range(0..2)];
            valid["spec"]["firewallSpec"] = Value::Null;
            valid["spec"]["firewallTemplateRef"] = json!({"name": template});
            if let Some(spec) = valid["spec"].as_object_mut() {
                spec.retain(|_, v| !v.is_null());
            }
        }
        AdmittedKind::FirewallTemplate => {
            valid["metadata"]["name"] = json!("edge");
            // A change the clusters and the deployment using it must be able to take.
            if rng.random_bool(0.3) {
                let networks = json!(["internet-mini-lab", "underlay-mini-lab"]);
                valid["spec"]["template"]["spec"]["networks"] = networks;
            }
        }
        _ => {}
    }
    valid
}

/// A valid object of `kind` as the Go provider's users write it (`v1alpha1`), for the kinds
/// served in it.
fn go_provider_object(kind: AdmittedKind) -> Option<Value> {
    let spec = match kind {
        AdmittedKind::Cluster => json!({"partition": "mini-lab", "projectID": PROJECT,
            "controlPlaneEndpoint": {"host": "127.100.0.9", "port": 443}}),
        AdmittedKind::Machine => json!({"image": "ubuntu-26.4", "size": "v1-small-x86"}),
        AdmittedKind::MachineTemplate => {
            json!({"template": {"spec": {"image": "ubuntu-26.4", "size": "v1-small-x86"}}})
        }
        AdmittedKind::FirewallTemplate => {
            json!({"image": "firewall-ubuntu-3.0", "size": "v1-small-x86",
            "networks": ["internet-mini-lab"], "partition": "mini-lab", "project": PROJECT,
            "initialRuleSet": {"egress": [{"protocol": "TCP", "ports": [443], "to": ["0.0.0.0/0"]}]}})
        }
        AdmittedKind::ClusterTemplate | AdmittedKind::Firewall => return None,
    };
    let name = if kind == AdmittedKind::FirewallTemplate {
        "edge"
    } else {
        "fuzz"
    };
    Some(json!({"apiVersion": V1ALPHA1, "kind": kind.name(),
        "metadata": {"name": name, "namespace": "default", "uid": "0d9c1b7e-0000-4000-8000-000000000002",
                     "labels": {"cluster.x-k8s.io/cluster-name": "fuzz"}},
        "spec": spec}))
}

/// The review the apiserver sends for `object`, asked for as `version`.
fn review(kind: AdmittedKind, version: &str, op: &str, object: Value, old: Option<Value>) -> Value {
    let group = "infrastructure.cluster.x-k8s.io";
    let name = object["metadata"]["name"].clone();
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "3c5d7c1e-0000-4000-8000-000000000001",
            "kind": {"group": group, "version": "v1alpha4", "kind": kind.name()},
            "resource": {"group": group, "version": "v1alpha4", "resource": kind.plural()},
            "requestKind": {"group": group, "version": version, "kind": kind.name()},
            "name": name, "namespace": "default", "operation": op,
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

/// The field path a denial begins with (`spec.rules.egress[0].ports[1]` of
/// `spec.rules.egress[0].ports[1]: …`), when it is a field of `schema`: each name a property
/// or a key of a map (or `metadata`'s, which the apiserver's own schema has), each `[…]` an
/// element of a list or a map.
fn field_of_schema<'a>(message: &'a str, schema: &Value) -> Option<&'a str> {
    let (path, _) = message.split_once(": ")?;
    if path.starts_with("metadata.") || path == "metadata" {
        return Some(path);
    }
    let mut at = schema;
    for segment in path.split('.') {
        let (name, indices) = segment
            .split_once('[')
            .map_or((segment, ""), |(n, i)| (n, i));
        at = match at.get("properties").and_then(|p| p.get(name)) {
            Some(property) => property,
            None => at.get("additionalProperties")?,
        };
        for _ in indices.matches(']') {
            at = at.get("items").or_else(|| at.get("additionalProperties"))?;
        }
    }
    Some(path)
}

/// The version a spoilt object of `kind` is asked for in, the object as the management cluster
/// held it (for an update) and the spoilt one, both as the webhooks get them (`v1alpha4`). Half
/// the Go provider's kinds are written and spoilt in `v1alpha1` and converted as the apiserver
/// converts them; None when it could not.
fn spoilt_review_objects(
    kind: AdmittedKind,
    rng: &mut StdRng,
) -> Option<(&'static str, Value, Value)> {
    if let Some(go) = go_provider_object(kind).filter(|_| rng.random_bool(0.5)) {
        let bad = spoilt(rng, &go, &[PathSegment::Key("spec".into())]);
        let hub = |o: &Value| {
            capms::conversion::convert(o, "infrastructure.cluster.x-k8s.io/v1alpha4").ok()
        };
        return Some(("v1alpha1", hub(&go)?, hub(&bad)?));
    }
    let valid = reading(kind, rng);
    let bad = spoilt(rng, &valid, &[PathSegment::Key("spec".into())]);
    // An update starts from the template as the management cluster holds it.
    let old = match kind {
        AdmittedKind::FirewallTemplate => {
            let mut held = object(kind, spec(kind));
            held["metadata"]["name"] = json!("edge");
            held
        }
        _ => valid,
    };
    Some(("v1alpha4", old, bad))
}

#[tokio::test]
async fn spoilt_objects_of_every_kind_are_answered_and_every_denial_names_a_field_of_its_schema() {
    capms::tls::install_default_provider();
    let api = management_cluster();
    let (state, _metal) = state(&api).await;
    let routes = routes();
    let mut rng = rng(0xAD_0155);
    let (mut allowed, mut denied, mut not_converted) = (0, 0, 0);
    let (mut as_v1alpha1, mut read_templates, mut read_partitions) = (0, 0, 0);
    let mut read_users = 0;
    for _ in 0..cases() {
        let route = routes[rng.random_range(0..routes.len())];
        let Some((version, valid, bad)) = spoilt_review_objects(route.kind, &mut rng) else {
            not_converted += 1;
            continue;
        };
        as_v1alpha1 += usize::from(version == "v1alpha1");
        let body = match rng.random_bool(0.5) {
            true => review(route.kind, version, "CREATE", bad, None),
            false => review(route.kind, version, "UPDATE", bad, Some(valid)),
        };
        let (status, out) = call(&state, route, serde_json::to_vec(&body).expect("json")).await;
        assert_eq!(status, 200, "{} answered {status} to {body}", route.path());
        let patch = out["response"]["patch"].as_str().unwrap_or_default();
        let patch = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap_or_default();
        // The partition of the machine's cluster, read through the apiserver.
        read_partitions += usize::from(String::from_utf8_lossy(&patch).contains("/spec/partition"));
        // The namespace's templates, read through the apiserver, named in a warning.
        let warnings = out["response"]["warnings"].to_string();
        read_templates += usize::from(warnings.contains("MetalStackFirewallTemplate"));
        let message = out["response"]["status"]["message"].to_string();
        read_users += usize::from(message.contains("uses this template"));
        match out["response"]["allowed"].as_bool() {
            Some(true) => allowed += 1,
            Some(false) => {
                denied += 1;
                let message = out["response"]["status"]["message"]
                    .as_str()
                    .unwrap_or_default();
                let schema = super::conversion::schema(route.kind.name(), version);
                assert!(
                    field_of_schema(message, schema).is_some(),
                    "{}: a denial naming no field of the {version} schema: {message:?}\nfor {body}",
                    route.path()
                );
            }
            None => panic!("{} gave no verdict: {out}", route.path()),
        }
    }
    eprintln!(
        "spoilt objects: {allowed} admitted, {denied} denied naming a field; {as_v1alpha1} written in v1alpha1 ({not_converted} more the apiserver could not convert); {read_partitions} machines given their cluster's partition, {read_templates} warnings naming the namespace's templates, {read_users} template changes denied for a cluster using it"
    );
    assert!(allowed > 0 && denied > 0 && as_v1alpha1 > cases() / 10);
    // The rules that read the management cluster were fuzzed too.
    assert!(read_partitions > 0 && read_templates > 0 && read_users > 0);
    let writes = api.take_writes();
    assert!(writes.is_empty(), "admission wrote: {writes:?}");
}

#[tokio::test]
async fn random_bytes_and_json_are_answered_without_a_panic_or_a_5xx() {
    capms::tls::install_default_provider();
    let api = management_cluster();
    let (state, _metal) = state(&api).await;
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

#[test]
fn a_denial_names_a_field_only_when_its_schema_has_it() {
    let schema = json!({"properties": {"spec": {"properties": {
        "rules": {"properties": {"egress": {"items": {"properties": {"ports": {"items": {}}}}}}},
        "tags": {"additionalProperties": {}}}}}});
    let named = |m: &'static str| field_of_schema(m, &schema);
    assert_eq!(
        named("spec.rules.egress[0].ports[1]: bad"),
        Some("spec.rules.egress[0].ports[1]")
    );
    assert_eq!(named("spec.tags[team]: bad"), Some("spec.tags[team]"));
    assert_eq!(named("spec.tags.team: bad"), Some("spec.tags.team"));
    assert_eq!(named("metadata.name: bad"), Some("metadata.name"));
    assert_eq!(named("error: something"), None);
    assert_eq!(named("spec.size: v1alpha4 has no such field"), None);
    assert_eq!(named("no path at all"), None);
}

/// The rules that read the management cluster answer from it: a cluster naming a template there
/// is not is warned, naming the templates there are.
#[tokio::test]
async fn a_cluster_naming_a_missing_template_is_warned_with_the_templates_there_are() {
    capms::tls::install_default_provider();
    let api = management_cluster();
    let (state, _metal) = state(&api).await;
    let route = routes()
        .into_iter()
        .find(|r| r.kind == AdmittedKind::Cluster && r.path().starts_with("/validate"))
        .expect("the cluster's validating webhook");
    let mut cluster = object(AdmittedKind::Cluster, spec(AdmittedKind::Cluster));
    cluster["spec"]
        .as_object_mut()
        .map(|s| s.remove("firewallSpec"));
    cluster["spec"]["firewallTemplateRef"] = json!({"name": "nope"});
    let body = review(AdmittedKind::Cluster, "v1alpha4", "CREATE", cluster, None);
    let (_, out) = call(&state, route, serde_json::to_vec(&body).expect("json")).await;
    let warnings = out["response"]["warnings"].to_string();
    assert!(warnings.contains("edge"), "{out}");
}
