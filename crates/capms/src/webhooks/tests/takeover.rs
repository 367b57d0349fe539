//! Admission of what capms makes when it takes over a Go provider cluster.

use super::handlers::{call, review, state_with};
use super::*;

const MACHINE: &str = "00000000-0000-0000-0000-000000000002";

/// The default lab with [`MACHINE`] allocated as the Go provider allocates a firewall for the
/// firewall deployment `default/fwd`.
fn catalog_with_go_provider_firewall() -> Catalog {
    let mut state = lab();
    let network = private_network(&mut state);
    let request = metal_api::types::MachineAllocateRequest {
        uuid: Some(MACHINE.into()),
        projectid: PROJECT.into(),
        imageid: "firewall-ubuntu-3.0".into(),
        networks: Some(vec![metal_api::types::AllocationNetwork {
            networkid: network,
            autoacquire: None,
        }]),
        tags: vec![format!(
            "{}/firewall-deployment-resource=default.fwd",
            crate::ownership::DOMAIN
        )],
        ..Default::default()
    };
    state
        .machine_allocate(&request, None, "firewall", "test")
        .expect("allocated");
    state.catalog()
}

async fn admitted(labels: Value) -> Value {
    let object = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4",
        "kind": "MetalStackFirewall",
        "metadata": {"name": "c-firewall", "namespace": "default", "labels": labels},
        "spec": {"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86",
                 "providerID": format!("metal://mini-lab/{MACHINE}")}});
    let body = review("MetalStackFirewall", "CREATE", object, None, false);
    let path = Route {
        kind: AdmittedKind::Firewall,
        phase: AdmissionPhase::Validating,
    }
    .path();
    let state = state_with(Some(catalog_with_go_provider_firewall()), false);
    let (status, out) = call(state, &path, serde_json::to_vec(&body).expect("json")).await;
    assert_eq!(status, StatusCode::OK);
    out["response"].clone()
}

#[tokio::test]
async fn the_firewall_of_a_deployment_is_admitted_on_the_deployments_machine() {
    let label = crate::ownership::FIREWALL_DEPLOYMENT_LABEL;
    let response = admitted(json!({ label: "fwd" })).await;
    assert_eq!(response["allowed"], true, "{response}");
    let other = admitted(json!({ label: "another" })).await;
    assert_eq!(
        other["allowed"], false,
        "another deployment's machine: {other}"
    );
    let unlabelled = admitted(json!({})).await;
    let message = unlabelled["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("spec.providerID: machine"), "{unlabelled}");
}
