//! Updates: what may change once set and what may not, and updates that leave the spec alone,
//! which pass untouched (nothing to default or check, even when the spec would no longer pass, its
//! image left the catalog), so that finalizers, labels and owner references can always change.

use super::handlers::{call, machine_object, review, state_with};
use super::*;

const ID: &str = "00000000-0000-0000-0001-000000000001";

fn allocated_machine(image: &str, finalizers: Value) -> Value {
    let mut object = machine_object(json!({
        "image": image, "machineType": "v1-small-x86",
        "providerID": format!("metal://mini-lab/{ID}")
    }));
    object["metadata"]["finalizers"] = finalizers;
    object
}

async fn admit(phase: AdmissionPhase, object: Value, old: Value) -> Value {
    let body = review("MetalStackMachine", "UPDATE", object, Some(old), false);
    let path = Route {
        kind: AdmittedKind::Machine,
        phase,
    }
    .path();
    let state = state_with(Some(catalog()), false);
    let (status, out) = call(state, &path, serde_json::to_vec(&body).expect("json")).await;
    assert_eq!(status, StatusCode::OK);
    out["response"].clone()
}

#[tokio::test]
async fn a_finalizer_can_go_after_the_image_left_the_catalog() {
    let before = allocated_machine("gone-1.0", json!(["capms"]));
    let after = allocated_machine("gone-1.0", json!([]));
    let validated = admit(AdmissionPhase::Validating, after.clone(), before.clone()).await;
    assert_eq!(validated["allowed"], true, "{validated}");
    let mutated = admit(AdmissionPhase::Mutating, after, before).await;
    assert_eq!(mutated["allowed"], true, "{mutated}");
    assert!(mutated.get("patch").is_none_or(Value::is_null), "{mutated}");
}

#[tokio::test]
async fn a_changed_spec_is_still_checked() {
    let before = allocated_machine("gone-1.0", json!(["capms"]));
    let mut after = before.clone();
    after["spec"]["machineType"] = json!("v1-large-x86");
    let validated = admit(AdmissionPhase::Validating, after, before).await;
    assert_eq!(validated["allowed"], false, "{validated}");
    let message = validated["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("spec.machineType"), "{message}");
}

#[test]
fn an_allocated_firewall_keeps_its_machine_image_and_type() {
    let old = MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        provider_id: Some(format!("metal://mini-lab/{ID}")),
        ..Default::default()
    };
    let errors = |spec: &MetalStackFirewallSpec, old: &MetalStackFirewallSpec| {
        errors_of(|r| validate_firewall(r, "spec", spec, Some(old), None, None, None))
    };
    let immutable =
        "spec.image: image and machineType are immutable once the firewall is allocated";
    let mut rules = old.clone();
    rules.rules = Some(FirewallRules::default());
    assert_eq!(
        errors(&rules, &old),
        Vec::<String>::new(),
        "rules may change"
    );
    for change in [
        MetalStackFirewallSpec {
            image: "firewall-ubuntu-3.1".into(),
            ..old.clone()
        },
        MetalStackFirewallSpec {
            machine_type: "v1-large-x86".into(),
            ..old.clone()
        },
    ] {
        let errors = errors(&change, &old);
        assert!(
            errors.len() == 1 && errors[0].starts_with(immutable),
            "{errors:?}"
        );
        let unallocated = MetalStackFirewallSpec {
            provider_id: None,
            ..old.clone()
        };
        assert_eq!(
            errors_of(|r| validate_firewall(
                r,
                "spec",
                &change,
                Some(&unallocated),
                None,
                None,
                None
            )),
            Vec::<String>::new(),
            "not allocated yet"
        );
    }
    let moved = MetalStackFirewallSpec {
        provider_id: Some("metal://mini-lab/another".into()),
        ..old.clone()
    };
    assert_eq!(
        errors(&moved, &old),
        ["spec.providerID: is immutable once set"]
    );
}

#[test]
fn each_cluster_field_fixed_once_set_is_refused_alone_when_changed() {
    let mut old = cluster_spec();
    old.private_network_id = Some("private-1".into());
    old.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("127.0.0.10".into()),
        port: Some(443),
    });
    let errors = |new: &MetalStackClusterSpec, old: &MetalStackClusterSpec| {
        errors_of(|r| validate_cluster(r, "spec", new, Some(old), None))
    };
    assert_eq!(errors(&old, &old), Vec::<String>::new());
    fn endpoint(host: &str, port: i32) -> Option<ApiEndpoint> {
        Some(ApiEndpoint {
            host: Some(host.into()),
            port: Some(port),
        })
    }
    type Change = fn(&mut MetalStackClusterSpec);
    let changes: [(&str, Change); 6] = [
        ("partition", |s| s.partition = "elsewhere".into()),
        ("projectID", |s| s.project_id = "another".into()),
        ("publicNetworkID", |s| s.public_network_id = None),
        ("privateNetworkID", |s| {
            s.private_network_id = Some("private-2".into())
        }),
        ("controlPlaneEndpoint.host", |s| {
            s.control_plane_endpoint = endpoint("127.0.0.11", 443);
        }),
        ("controlPlaneEndpoint.port", |s| {
            s.control_plane_endpoint = endpoint("127.0.0.10", 6443);
        }),
    ];
    for (field, change) in changes {
        let mut new = old.clone();
        change(&mut new);
        assert_eq!(
            errors(&new, &old),
            [format!("spec.{field}: is immutable once set")],
            "{field}"
        );
    }
    // Not set before, each may be set now (capms fills the network and the endpoint itself).
    let unset = MetalStackClusterSpec {
        private_network_id: None,
        control_plane_endpoint: None,
        ..old.clone()
    };
    assert_eq!(errors(&old, &unset), Vec::<String>::new());
}

#[test]
fn a_machine_s_provider_id_is_checked_until_it_is_allocated() {
    let c = catalog();
    let named = MetalStackMachineSpec {
        provider_id: Some("metal://other/00000000-0000-0000-0000-000000000001".into()),
        ..machine_spec()
    };
    let errors = errors_of(|r| validate_machine(r, "spec", &named, None, Some(&c), None));
    assert!(
        errors.iter().any(|e| e.starts_with(
            "spec.providerID: names partition \"other\" but machine 00000000-0000-0000-0000-000000000001"
        )),
        "{errors:?}"
    );
    // A provider ID without a partition: the machine's must be the object's.
    let in_partition = |partition: &str| MetalStackMachineSpec {
        provider_id: Some("metalstack://00000000-0000-0000-0000-000000000001".into()),
        partition: Some(partition.into()),
        ..machine_spec()
    };
    let elsewhere =
        "machine 00000000-0000-0000-0000-000000000001 is in partition \"mini-lab\", not in";
    for (partition, refused) in [("other", true), ("mini-lab", false)] {
        let spec = in_partition(partition);
        let errors = errors_of(|r| validate_machine(r, "spec", &spec, None, Some(&c), None));
        let said = errors
            .iter()
            .any(|e| e.starts_with(&format!("spec.providerID: {elsewhere}")));
        assert_eq!(said, refused, "{partition}: {errors:?}");
    }
    // Allocated, the machine is its own whatever metal-api says of it now.
    let errors = errors_of(|r| validate_machine(r, "spec", &named, Some(&named), Some(&c), None));
    assert_eq!(errors, Vec::<String>::new());
}

#[test]
fn without_a_default_external_network_a_cluster_needs_its_own_or_an_address() {
    let mut c = catalog();
    for n in &mut c.networks {
        n.labels.remove(metal_api::tags::NETWORK_DEFAULT);
    }
    let own_address = |host: Option<&str>, ip: Option<&str>| MetalStackClusterSpec {
        public_network_id: None,
        control_plane_endpoint: host.map(|h| ApiEndpoint {
            host: Some(h.into()),
            port: None,
        }),
        control_plane_ip: ip.map(Into::into),
        ..cluster_spec()
    };
    let check = |spec: &MetalStackClusterSpec| {
        let errors = errors_of(|r| validate_cluster(r, "spec", spec, None, Some(&c)));
        errors
            .iter()
            .any(|e| e.starts_with("spec.publicNetworkID: is not set"))
    };
    assert!(check(&own_address(None, None)), "neither: refused");
    assert!(
        !check(&own_address(Some("127.0.0.10"), None)),
        "a host will do"
    );
    assert!(
        !check(&own_address(None, Some("127.0.0.10"))),
        "an IP will do"
    );
}
