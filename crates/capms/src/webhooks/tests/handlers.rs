//! The admission handlers over HTTP: reviews in, responses out.

use super::*;
use crate::cache::catalog::CatalogCache;
use crate::cache::catalogs::Catalogs;
use crate::cache::credentials::MetalClients;
use crate::webhooks::admit::DRY_RUN_ANNOTATION;
use std::sync::Arc;
use std::time::Duration;

// ---- handlers -----------------------------------------------------------------------------

pub(super) fn state_with(catalog: Option<Catalog>, deny: bool) -> WebhookState {
    let client = metal_api::Client::new(metal_api::Config::new(
        url::Url::parse("http://127.0.0.1:9/").expect("url"),
        metal_api::Auth::None,
    ))
    .expect("client");
    let cache = match catalog {
        Some(c) => CatalogCache::with_catalog(client.clone(), c),
        None => CatalogCache::new(client.clone(), Duration::from_secs(300)),
    };
    let clients = Arc::new(MetalClients::new(client, unanswering_apiserver()));
    WebhookState {
        caches: Default::default(),
        client: unanswering_apiserver(),
        catalogs: Catalogs::new(cache, clients, Duration::from_secs(300)),
        deny_when_metal_unreachable: deny,
        metrics: Default::default(),
    }
}

/// An apiserver that answers every request 503: what admission reads of it is then missing,
/// as when the apiserver cannot answer.
pub(super) fn unanswering_apiserver() -> kube::Client {
    let service = tower::service_fn(|_: axum::http::Request<kube::client::Body>| async {
        let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": "unavailable", "reason": "ServiceUnavailable", "code": 503});
        axum::http::Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(status.to_string().into_bytes()))
    });
    kube::Client::new(service, "default")
}

pub(super) fn review(
    kind: &str,
    operation: &str,
    object: Value,
    old: Option<Value>,
    dry_run: bool,
) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "3c5d7c1e-0000-4000-8000-000000000001",
            "kind": {"group": GROUP, "version": "v1alpha4", "kind": kind},
            "resource": {"group": GROUP, "version": "v1alpha4", "resource": format!("{}s", kind.to_lowercase())},
            "name": object["metadata"]["name"], "namespace": "default",
            "operation": operation, "userInfo": {"username": "tester"},
            "object": object, "oldObject": old, "dryRun": dry_run
        }
    })
}

pub(super) async fn call(state: WebhookState, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    capms_tls();
    let response = router(state)
        .oneshot(
            Request::post(path)
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body))
                .expect("request"),
        )
        .await
        .expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn capms_tls() {
    crate::tls::install_default_provider();
}

pub(super) fn machine_object(spec: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
           "metadata": {"name": "m", "namespace": "default"}, "spec": spec})
}

#[tokio::test]
async fn validation_denies_with_every_field_error() {
    let state = state_with(Some(catalog()), false);
    let body = review(
        "MetalStackMachine",
        "CREATE",
        machine_object(json!({"image": "nope-1.0", "machineType": "huge"})),
        None,
        false,
    );
    let (status, out) = call(
        state,
        &Route {
            kind: AdmittedKind::Machine,
            phase: AdmissionPhase::Validating,
        }
        .path(),
        serde_json::to_vec(&body).expect("json"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(out["response"]["allowed"], false);
    assert_eq!(
        out["response"]["uid"],
        "3c5d7c1e-0000-4000-8000-000000000001"
    );
    let message = out["response"]["status"]["message"]
        .as_str()
        .expect("message");
    assert!(
        message.contains("spec.image: image \"nope-1.0\"")
            && message.contains("spec.machineType: machine type \"huge\""),
        "{message}"
    );
    // Each refused field is a cause too, for clients that show only the causes.
    let details = &out["response"]["status"]["details"];
    assert_eq!(details["kind"], "MetalStackMachine");
    assert_eq!(details["group"], "infrastructure.cluster.x-k8s.io");
    let causes: Vec<(&str, &str, &str)> = details["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let text = |key: &str| c[key].as_str().unwrap_or_default();
            (text("reason"), text("field"), text("message"))
        })
        .collect();
    assert_eq!(causes.len(), 2, "{details}");
    assert!(
        causes
            .iter()
            .all(|(reason, ..)| *reason == "FieldValueInvalid")
    );
    assert_eq!(
        causes
            .iter()
            .map(|(_, field, _)| *field)
            .collect::<Vec<_>>(),
        ["spec.image", "spec.machineType"]
    );
    assert!(
        causes[1]
            .2
            .starts_with("machine type \"huge\" is not a metal-stack size; valid: "),
        "{causes:?}"
    );
}

#[tokio::test]
async fn defaulting_returns_a_patch_that_only_adds_defaults() {
    let state = state_with(Some(catalog()), false);
    let object = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha3", "kind": "MetalStackCluster",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"partition": "mini-lab", "projectID": PROJECT, "publicNetworkID": "internet-mini-lab",
                 "controlPlaneEndpoint": {"host": "127.100.0.9"}}});
    let body = review("MetalStackCluster", "CREATE", object.clone(), None, false);
    let (_, out) = call(
        state,
        &Route {
            kind: AdmittedKind::Cluster,
            phase: AdmissionPhase::Mutating,
        }
        .path(),
        serde_json::to_vec(&body).expect("json"),
    )
    .await;
    assert_eq!(out["response"]["allowed"], true, "{out}");
    assert_eq!(out["response"]["patchType"], "JSONPatch", "{out}");
    use base64::Engine;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(out["response"]["patch"].as_str().expect("patch"))
        .expect("base64");
    let patch: json_patch::Patch = serde_json::from_slice(&patch).expect("json patch");
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).expect("applies");
    assert_eq!(patched["spec"]["controlPlaneEndpoint"]["port"], 6443);
    patched["spec"]["controlPlaneEndpoint"]
        .as_object_mut()
        .expect("endpoint")
        .remove("port");
    assert_eq!(
        patched, object,
        "nothing but the default changed (apiVersion v1alpha3 kept)"
    );
}

#[tokio::test]
async fn unreachable_metal_api_admits_with_a_warning_or_denies() {
    let body = serde_json::to_vec(&review(
        "MetalStackMachine",
        "CREATE",
        machine_object(json!({"image": "x-1.0", "machineType": "y"})),
        None,
        false,
    ))
    .expect("json");
    let path = Route {
        kind: AdmittedKind::Machine,
        phase: AdmissionPhase::Validating,
    }
    .path();
    let (_, out) = call(state_with(None, false), &path, body.clone()).await;
    assert_eq!(out["response"]["allowed"], true);
    assert!(
        out["response"]["warnings"][0]
            .as_str()
            .expect("warning")
            .contains("metal-api's catalog could not be read")
    );
    let (_, out) = call(state_with(None, true), &path, body).await;
    assert_eq!(out["response"]["allowed"], false);
}

#[tokio::test]
async fn templates_are_immutable_except_for_clusterclass_dry_runs() {
    let state = state_with(Some(catalog()), false);
    let template = |image: &str, dry_run_annotation: bool| {
        let mut t = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachineTemplate",
            "metadata": {"name": "t", "namespace": "default"},
            "spec": {"template": {"spec": {"image": image, "machineType": "v1-small-x86"}}}});
        if dry_run_annotation {
            t["metadata"]["annotations"] = json!({DRY_RUN_ANNOTATION: ""});
        }
        t
    };
    let path = Route {
        kind: AdmittedKind::MachineTemplate,
        phase: AdmissionPhase::Validating,
    }
    .path();
    let update = |dry_run: bool, annotated: bool| {
        serde_json::to_vec(&review(
            "MetalStackMachineTemplate",
            "UPDATE",
            template("debian-13.0", annotated),
            Some(template("ubuntu-26.4", annotated)),
            dry_run,
        ))
        .expect("json")
    };
    let (_, out) = call(state.clone(), &path, update(false, false)).await;
    assert_eq!(out["response"]["allowed"], false);
    assert!(
        out["response"]["status"]["message"]
            .as_str()
            .expect("message")
            .starts_with("spec.template: templates are immutable")
    );
    let (_, out) = call(state.clone(), &path, update(true, false)).await;
    assert_eq!(
        out["response"]["allowed"], false,
        "a dry run without the annotation is still an update"
    );
    let (_, out) = call(state, &path, update(true, true)).await;
    assert_eq!(out["response"]["allowed"], true, "ClusterClass dry run");
}

/// A MetalStackFirewallTemplate named edge whose firewalls have `spec`.
fn firewall_template(spec: &Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": "edge", "namespace": "default"}, "spec": {"template": {"spec": spec}}})
}

/// The answer of `phase` to a review of a firewall template with `spec` (and `old` before it).
pub(super) async fn firewall_template_review(
    state: &WebhookState,
    phase: AdmissionPhase,
    spec: &Value,
    old: Option<&Value>,
) -> Value {
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    let review = review(
        "MetalStackFirewallTemplate",
        operation,
        firewall_template(spec),
        old.map(firewall_template),
        false,
    );
    let route = Route {
        kind: AdmittedKind::FirewallTemplate,
        phase,
    };
    let body = serde_json::to_vec(&review).expect("json");
    call(state.clone(), &route.path(), body).await.1
}

#[tokio::test]
async fn firewall_templates_are_defaulted_checked_and_may_change() {
    let state = state_with(Some(catalog()), false);
    let spec = json!({"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86",
        "rules": {"egress": [{"ports": [443], "to": ["0.0.0.0/0"]}]}});

    let out = firewall_template_review(&state, AdmissionPhase::Mutating, &spec, None).await;
    let patch = out["response"]["patch"].as_str().expect("a patch");
    use base64::Engine;
    let patch: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(patch)
            .expect("base64"),
    )
    .expect("JSON patch");
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/template/spec/rules/egress/0/protocol", "value": "tcp"}])
    );

    let out = firewall_template_review(&state, AdmissionPhase::Validating, &spec, None).await;
    assert_eq!(out["response"]["allowed"], true, "{out}");

    let mut pinned = spec.clone();
    pinned["providerID"] = json!("metal://mini-lab/00000000-0000-0000-0000-0000000000f1");
    let out = firewall_template_review(&state, AdmissionPhase::Validating, &pinned, None).await;
    assert_eq!(out["response"]["allowed"], false);

    // A change rolls the firewalls made from the template, so it is checked, not refused.
    let mut changed = spec.clone();
    changed["image"] = json!("firewall-ubuntu-3");
    let out =
        firewall_template_review(&state, AdmissionPhase::Validating, &changed, Some(&spec)).await;
    assert_eq!(out["response"]["allowed"], true, "{out}");
    changed["machineType"] = json!("c1-large-x86");
    let out =
        firewall_template_review(&state, AdmissionPhase::Validating, &changed, Some(&spec)).await;
    let message = out["response"]["status"]["message"]
        .as_str()
        .expect("message");
    assert!(
        message.starts_with("spec.template.spec.machineType: machine type \"c1-large-x86\" is not a metal-stack size; valid: v1-small-x86"),
        "{message}"
    );
}

#[tokio::test]
async fn malformed_and_foreign_reviews_get_well_formed_denials() {
    let state = state_with(Some(catalog()), false);
    let path = Route {
        kind: AdmittedKind::Cluster,
        phase: AdmissionPhase::Validating,
    }
    .path();
    for body in [
        b"".to_vec(),
        b"not json".to_vec(),
        b"{}".to_vec(),
        br#"{"request": 1}"#.to_vec(),
    ] {
        let (status, out) = call(state.clone(), &path, body).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(out["response"]["allowed"], false, "{out}");
    }
    // A review of another kind sent to this route.
    let body = review(
        "MetalStackMachine",
        "CREATE",
        machine_object(json!({"image": "ubuntu-26.4", "machineType": "v1-small-x86"})),
        None,
        false,
    );
    let (_, out) = call(
        state.clone(),
        &path,
        serde_json::to_vec(&body).expect("json"),
    )
    .await;
    assert_eq!(out["response"]["allowed"], false);
    // A spec that does not fit the type at all.
    let body = review(
        "MetalStackCluster",
        "CREATE",
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster", "metadata": {"name": "c"}, "spec": {"partition": 5}}),
        None,
        false,
    );
    let (_, out) = call(
        state.clone(),
        &path,
        serde_json::to_vec(&body).expect("json"),
    )
    .await;
    assert_eq!(out["response"]["allowed"], false);
    // Deletion is never blocked.
    let mut body = review(
        "MetalStackCluster",
        "DELETE",
        Value::Null,
        Some(json!({"metadata": {"name": "c"}})),
        false,
    );
    body["request"]["name"] = json!("c");
    let (_, out) = call(state, &path, serde_json::to_vec(&body).expect("json")).await;
    assert_eq!(out["response"]["allowed"], true, "{out}");
}

/// A rule protocol capms does not know, a port out of range and a project metal-api does not
/// know: one denial lists all three, each by its field (the fuzz tests in `tests/fuzz` take
/// generated reviews by the thousand).
#[tokio::test]
async fn one_misfit_field_hides_no_other_error() {
    let state = state_with(Some(catalog()), false);
    let object = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"partition": "mini-lab", "projectID": "no-such-project", "publicNetworkID": "internet-mini-lab",
                 "firewallSpec": {"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86",
                    "rules": {"egress": [{"protocol": "icmp", "ports": [443], "to": ["0.0.0.0/0"]},
                                         {"protocol": "tcp", "ports": [70000], "to": ["0.0.0.0/0"]}]}}}});
    for phase in [AdmissionPhase::Mutating, AdmissionPhase::Validating] {
        let route = Route {
            kind: AdmittedKind::Cluster,
            phase,
        };
        let body = review("MetalStackCluster", "CREATE", object.clone(), None, false);
        let (_, out) = call(
            state.clone(),
            &route.path(),
            serde_json::to_vec(&body).expect("json"),
        )
        .await;
        let message = out["response"]["status"]["message"]
            .as_str()
            .expect("a denial");
        for expected in [
            "spec.firewallSpec.rules.egress[0].protocol: unknown variant `icmp`, expected `tcp` or `udp`",
            "spec.firewallSpec.rules.egress[1].ports[0]:",
            "spec.projectID: project \"no-such-project\" does not exist in metal-api",
        ] {
            assert!(message.contains(expected), "{expected:?} not in {message}");
        }
    }
}

/// An apiserver holding one Secret, `creds` in `default`, with `data`.
fn apiserver_with_secret(data: Value) -> kube::Client {
    let service = tower::service_fn(move |request: axum::http::Request<kube::client::Body>| {
        let data = data.clone();
        async move {
            let (status, body) = match request.uri().path() {
                "/api/v1/namespaces/default/secrets/creds" => (
                    StatusCode::OK,
                    json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "creds", "namespace": "default"}, "data": data}),
                ),
                _ => (
                    StatusCode::NOT_FOUND,
                    json!({"apiVersion": "v1", "kind": "Status",
                    "status": "Failure", "message": "not found", "reason": "NotFound", "code": 404}),
                ),
            };
            axum::http::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(body.to_string().into_bytes()))
        }
    });
    kube::Client::new(service, "default")
}

#[tokio::test]
async fn a_newly_named_credentials_secret_of_the_wrong_shape_is_refused_a_missing_one_warned_of() {
    use base64::Engine;
    let path = Route {
        kind: AdmittedKind::Cluster,
        phase: AdmissionPhase::Validating,
    }
    .path();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let cluster = |name: &str| {
        let object = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"partition": "mini-lab", "projectID": "00000000-0000-0000-0000-000000000001",
                     "credentialsRef": {"name": name}}});
        serde_json::to_vec(&review("MetalStackCluster", "CREATE", object, None, false))
            .expect("json")
    };
    let mut state = state_with(Some(catalog()), true);
    state.client =
        apiserver_with_secret(json!({"url": b64("http://127.0.0.1:1/"), "hmac": b64("the-key")}));
    let (_, good) = call(state.clone(), &path, cluster("creds")).await;
    assert_eq!(good["response"]["allowed"], true, "{good}");
    let (_, missing) = call(state, &path, cluster("other")).await;
    assert_eq!(missing["response"]["allowed"], true, "{missing}");
    let warnings = missing["response"]["warnings"].to_string();
    assert!(
        warnings.contains("Secret default/other does not exist (yet)"),
        "{missing}"
    );

    let mut state = state_with(Some(catalog()), true);
    state.client = apiserver_with_secret(
        json!({"url": b64("http://127.0.0.1:1/"), "hmac": b64("the-key"), "hmacAuthType": b64("edit")}),
    );
    let (_, wrong) = call(state, &path, cluster("creds")).await;
    assert_eq!(wrong["response"]["allowed"], false, "{wrong}");
    let message = wrong["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains(
            "spec.credentialsRef.name: the credentials Secret default/creds: `hmacAuthType`"
        ) && message.contains("Metal-View, Metal-Edit, Metal-Admin")
            && !wrong.to_string().contains("the-key"),
        "{wrong}"
    );
}

/// A cluster naming credentials is judged by its own metal-api's catalog, never by capms's: when
/// its Secret cannot be read, it is admitted with a warning naming the Secret and saying that the
/// check waits for capms to act.
#[tokio::test]
async fn a_cluster_with_credentials_of_its_own_is_not_judged_by_capms_s_own_catalog() {
    let path = Route {
        kind: AdmittedKind::Cluster,
        phase: AdmissionPhase::Validating,
    }
    .path();
    let cluster = |credentials: Option<Value>| {
        let mut spec =
            json!({"partition": "elsewhere", "projectID": "00000000-0000-0000-0000-000000000001"});
        if let Some(reference) = credentials {
            spec["credentialsRef"] = reference;
        }
        let object = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
            "metadata": {"name": "c", "namespace": "default"}, "spec": spec});
        serde_json::to_vec(&review("MetalStackCluster", "CREATE", object, None, false))
            .expect("json")
    };
    let (_, own) = call(state_with(Some(catalog()), true), &path, cluster(None)).await;
    assert_eq!(own["response"]["allowed"], false, "{own}");
    let theirs = cluster(Some(json!({"name": "team-metal"})));
    let (_, theirs) = call(state_with(Some(catalog()), true), &path, theirs).await;
    assert_eq!(theirs["response"]["allowed"], true, "{theirs}");
    let warning = theirs["response"]["warnings"][0]
        .as_str()
        .unwrap_or_default();
    assert!(
        warning.starts_with("reading the credentials Secret default/team-metal: ")
            && warning.ends_with("are checked when capms acts, not here"),
        "{theirs}"
    );
}
