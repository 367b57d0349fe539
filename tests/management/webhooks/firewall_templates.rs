//! Firewall templates may change (a change rolls the firewalls made from them), but never into
//! one that a cluster using the template could not get a firewall from.

use super::Admission;
use serde_json::{Value, json};

fn template(name: &str, networks: &[&str]) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackFirewallTemplate",
           "metadata": {"name": name},
           "spec": {"template": {"spec": {"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86", "networks": networks}}}})
}

/// Runs after `good_objects_are_admitted_and_defaulted`: MetalStackCluster `templated` names
/// the firewall template `edge`, which does not exist yet.
pub(super) fn templates_change_only_into_what_their_clusters_can_use(a: &Admission<'_>) {
    let underlay = "spec.template.spec.networks[1]: network \"underlay-mini-lab\" is an underlay network, which metal-api adds to every firewall itself";
    let user = format!(
        "MetalStackCluster {}/templated uses this template, and its firewall could not be allocated; valid external networks: internet-mini-lab",
        a.ns
    );
    a.refused(
        "edge-underlay.json",
        template("edge", &["internet-mini-lab", "underlay-mini-lab"]),
        &[underlay, &user],
    );
    a.admitted("edge.json", template("edge", &["internet-mini-lab"]));
    let mut changed = template("edge", &["internet-mini-lab"]);
    changed["spec"]["template"]["spec"]["image"] = json!("firewall-ubuntu-3");
    a.admitted("edge-changed.json", changed);

    // Nobody uses it yet; the cluster that would is refused, naming the template's field.
    a.admitted(
        "edge-underlay.json",
        template("edge-underlay", &["internet-mini-lab", "underlay-mini-lab"]),
    );
    let out = a.patch_cluster(
        "templated",
        r#"{"spec":{"firewallTemplateRef":{"name":"edge-underlay"}}}"#,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "admitted");
    assert!(
        stderr.contains(&format!(
            "spec.firewallTemplateRef: MetalStackFirewallTemplate edge-underlay: {underlay}"
        )),
        "{stderr}"
    );
}
