//! Fields that differ between the schemas, converted as each side reads them.

use super::api_version;
use crate::conversion::{KEPT_ANNOTATION, convert};
use serde_json::{Value, json};

#[test]
fn go_provider_objects_convert_to_what_capms_reads() {
    let go = json!({
        "apiVersion": api_version("v1alpha1"), "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": "fw", "namespace": "n"},
        "spec": {"image": "firewall-ubuntu-3.0", "size": "c1-large-x86", "networks": ["internet"],
                 "partition": "p", "project": "x",
                 "initialRuleSet": {"egress": [{"protocol": "TCP", "ports": [443], "to": ["0.0.0.0/0"]}]}},
    });
    let hub = convert(&go, &api_version("v1alpha4")).unwrap_or_default();
    let spec = &hub["spec"]["template"]["spec"];
    assert_eq!(spec["machineType"], "c1-large-x86");
    assert_eq!(spec["rules"]["egress"][0]["protocol"], "tcp");
    assert_eq!(spec["networks"], json!(["internet"]));
    let kept = hub["metadata"]["annotations"][KEPT_ANNOTATION]
        .as_str()
        .unwrap_or_default();
    // Kept under the version that could not pass them on, for the way back to it.
    let kept: serde_json::Value = serde_json::from_str(kept).unwrap_or_default();
    let from_v1alpha1 = kept.get("v1alpha1").map(ToString::to_string);
    assert!(
        from_v1alpha1.is_some_and(|k| k.contains("/spec/partition") && k.contains("/spec/project")),
        "{kept}"
    );
}

fn types(object: &Value) -> Vec<&str> {
    let conditions = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten();
    conditions.filter_map(|c| c["type"].as_str()).collect()
}

#[test]
fn conditions_show_under_the_go_provider_s_names_in_v1alpha1_and_leave_again() {
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": "2026-11-26T00:00:00Z"});
    let cases = [
        (
            "MetalStackCluster",
            "NetworkReady",
            "ClusterNodeNetworkEnsured",
        ),
        ("MetalStackMachine", "MachineAllocated", "MachineCreated"),
    ];
    for (kind, capms, go) in cases {
        let hub = json!({
            "apiVersion": api_version("v1alpha4"), "kind": kind,
            "metadata": {"name": "o", "namespace": "n"},
            "spec": {"partition": "p", "projectID": "x", "image": "i", "machineType": "m"},
            "status": {"conditions": [condition(capms)]},
        });
        let shown = convert(&hub, &api_version("v1alpha1")).unwrap_or_default();
        assert_eq!(types(&shown), [capms, go], "{kind} as v1alpha1");
        let back = convert(&shown, &api_version("v1alpha4")).unwrap_or_default();
        assert_eq!(types(&back), [capms], "{kind} back from v1alpha1");
        // Stored as v1alpha1 (no annotation of capms's to restore from): the Go provider's
        // name leaves where capms's condition is its source, and stays where it is alone.
        let mut stored = shown.clone();
        stored["metadata"]["annotations"] = json!({});
        let read = convert(&stored, &api_version("v1alpha4")).unwrap_or_default();
        assert_eq!(types(&read), [capms], "{kind} stored as v1alpha1");
        stored["status"]["conditions"] = json!([condition(go)]);
        let read = convert(&stored, &api_version("v1alpha4")).unwrap_or_default();
        assert_eq!(types(&read), [go], "{kind}: the Go provider's alone");
    }
}

#[test]
fn the_go_provider_s_empty_provider_id_is_none_in_capms_s_versions() {
    for (provider_id, expected) in [("", None), ("metal://p/m1", Some("metal://p/m1"))] {
        let go = json!({
            "apiVersion": api_version("v1alpha1"), "kind": "MetalStackMachine",
            "metadata": {"name": "m", "namespace": "n"},
            "spec": {"image": "i", "size": "s", "providerID": provider_id},
        });
        let hub = convert(&go, &api_version("v1alpha4")).unwrap_or_default();
        assert_eq!(
            hub["spec"]["providerID"].as_str(),
            expected,
            "{provider_id:?}"
        );
    }
}

#[test]
fn a_capms_firewall_template_s_protocols_show_in_the_go_provider_s_case() {
    let hub = json!({
        "apiVersion": api_version("v1alpha4"), "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": "fw", "namespace": "n"},
        "spec": {"template": {"spec": {"image": "i", "machineType": "m",
            "rules": {"egress": [{"protocol": "tcp", "ports": [443], "to": ["0.0.0.0/0"]}],
                      "ingress": [{"protocol": "udp", "ports": [53], "from": ["10.0.0.0/8"]}]}}}},
    });
    let go = convert(&hub, &api_version("v1alpha1")).unwrap_or_default();
    let rules = &go["spec"]["initialRuleSet"];
    assert_eq!(
        (
            &rules["egress"][0]["protocol"],
            &rules["ingress"][0]["protocol"]
        ),
        (&json!("TCP"), &json!("UDP")),
        "{go}"
    );
}

/// The Go provider's machine template has no status in its schema: a template's capacity
/// leaves it whole (the apiserver refuses an undeclared field, as capms's status write met when
/// the template had a `v1alpha1` applier), and comes back on the way to capms's versions.
#[test]
fn a_machine_templates_status_leaves_v1alpha1_whole_and_comes_back() {
    let ours = json!({
        "apiVersion": api_version("v1alpha4"), "kind": "MetalStackMachineTemplate",
        "metadata": {"name": "t", "namespace": "n"},
        "spec": {"template": {"spec": {"image": "ubuntu-24.04", "machineType": "c1-large-x86"}}},
        "status": {"capacity": {"cpu": "4", "memory": "16Gi"},
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}},
    });
    let go = convert(&ours, &api_version("v1alpha1")).unwrap_or_default();
    assert_eq!(go.get("status"), None, "{go}");
    assert_eq!(go["spec"]["template"]["spec"]["size"], "c1-large-x86");
    let back = convert(&go, &api_version("v1alpha4")).unwrap_or_default();
    assert_eq!(back["status"], ours["status"], "{back}");
}
