//! Updates that leave the spec alone pass untouched: nothing to default or check, even when the
//! spec would no longer pass (its image left the catalog), so that finalizers, labels and owner
//! references can always change.

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

async fn admit(step: Step, object: Value, old: Value) -> Value {
    let body = review("MetalStackMachine", "UPDATE", object, Some(old), false);
    let path = Route {
        kind: Kind::Machine,
        step,
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
    let validated = admit(Step::Validate, after.clone(), before.clone()).await;
    assert_eq!(validated["allowed"], true, "{validated}");
    let mutated = admit(Step::Mutate, after, before).await;
    assert_eq!(mutated["allowed"], true, "{mutated}");
    assert!(mutated.get("patch").is_none_or(Value::is_null), "{mutated}");
}

#[tokio::test]
async fn a_changed_spec_is_still_checked() {
    let before = allocated_machine("gone-1.0", json!(["capms"]));
    let mut after = before.clone();
    after["spec"]["machineType"] = json!("v1-large-x86");
    let validated = admit(Step::Validate, after, before).await;
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
