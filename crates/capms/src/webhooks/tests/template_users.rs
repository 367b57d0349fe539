//! Firewall templates and the clusters using them, which admission reads from the apiserver
//! (here a stand-in answering what it asks).

use super::handlers::{call, firewall_template_review, review, state_with};
use super::*;
use kube::client::Body;

const UNDERLAY: [&str; 2] = ["internet-mini-lab", "underlay-mini-lab"];

fn template(name: &str, networks: &[&str]) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": {"spec": {"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86",
                                       "networks": networks}}}})
}

fn cluster(template: &str) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
        "metadata": {"name": "templated", "namespace": "default"},
        "spec": {"partition": "mini-lab", "projectID": PROJECT,
                 "firewallTemplateRef": {"name": template}}})
}

/// What the apiserver holds at `path`: the MetalStackCluster `templated` naming the template
/// `edge`, the template `edge-underlay` (whose underlay network no firewall may name), no
/// firewall deployments.
fn stored(path: &str) -> Option<Value> {
    let list = |items: Vec<Value>| json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items});
    let (collection, name) = path.rsplit_once('/')?;
    match (collection.rsplit('/').next()?, name) {
        ("default", "metalstackclusters") => Some(list(vec![cluster("edge")])),
        ("default", "metalstackfirewalldeployments") => Some(list(Vec::new())),
        ("default", "metalstackfirewalltemplates") => {
            Some(list(vec![template("edge-underlay", &UNDERLAY)]))
        }
        ("metalstackfirewalltemplates", "edge-underlay") => {
            Some(template("edge-underlay", &UNDERLAY))
        }
        _ => None,
    }
}

/// The stand-in apiserver; `failing`, one answering every request with 500.
fn apiserver(failing: bool) -> kube::Client {
    let service = tower::service_fn(move |request: Request<Body>| async move {
        let found = stored(request.uri().path()).filter(|_| !failing);
        let (status, body) = match found {
            Some(object) => (StatusCode::OK, object),
            None => {
                let code = if failing { 500 } else { 404 };
                let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                    "message": "stand-in", "reason": "NotFound", "code": code});
                (
                    StatusCode::from_u16(code).unwrap_or(StatusCode::NOT_FOUND),
                    status,
                )
            }
        };
        let response = axum::http::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string().into_bytes()));
        Ok::<_, std::convert::Infallible>(response.expect("response"))
    });
    kube::Client::new(service, "default")
}

#[tokio::test]
async fn a_template_is_refused_naming_the_cluster_using_it_that_it_could_not_serve() {
    let mut state = state_with(Some(catalog()), false);
    state.client = apiserver(false);
    let spec = &template("edge", &UNDERLAY)["spec"]["template"]["spec"];
    let out = firewall_template_review(&state, AdmissionPhase::Validating, spec, None).await;
    let message = out["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("spec.template.spec.networks[1]")
            && message.contains("MetalStackCluster default/templated uses this template"),
        "{out}"
    );
    let fine = &template("edge", &UNDERLAY[..1])["spec"]["template"]["spec"];
    let out = firewall_template_review(&state, AdmissionPhase::Validating, fine, None).await;
    assert_eq!(out["response"]["allowed"], true, "{out}");

    // An apiserver that cannot answer leaves the template checked on its own.
    state.client = apiserver(true);
    let out = firewall_template_review(&state, AdmissionPhase::Validating, spec, None).await;
    assert_eq!(out["response"]["allowed"], true, "{out}");
}

/// The answer to a new MetalStackCluster naming the firewall template `name`.
async fn cluster_review(state: &WebhookState, name: &str) -> Value {
    let review = review("MetalStackCluster", "CREATE", cluster(name), None, false);
    let route = Route {
        kind: AdmittedKind::Cluster,
        phase: AdmissionPhase::Validating,
    };
    let body = serde_json::to_vec(&review).expect("json");
    call(state.clone(), &route.path(), body).await.1
}

#[tokio::test]
async fn a_cluster_naming_a_template_is_checked_against_it_or_warned_that_it_is_missing() {
    let mut state = state_with(Some(catalog()), false);
    state.client = apiserver(false);
    let out = cluster_review(&state, "edge-underlay").await;
    let message = out["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with("spec.firewallTemplateRef") && message.contains("underlay"),
        "{out}"
    );
    let out = cluster_review(&state, "edge-later").await;
    assert_eq!(out["response"]["allowed"], true, "{out}");
    let warnings = out["response"]["warnings"].to_string();
    assert!(
        warnings.contains("edge-later") && warnings.contains("edge-underlay"),
        "names the missing template and those there are: {out}"
    );
}
