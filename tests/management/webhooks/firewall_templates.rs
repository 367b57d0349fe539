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

/// Runs after `templates_change_only_into_what_their_clusters_can_use`: the templates made in
/// capms's versions and one of the Go provider's, listed together as `v1alpha1` (as a tool of
/// the Go provider's lists them). capms's show an empty partition and project, which `v1alpha1`
/// requires and capms takes from the cluster; one unshowable template would fail the whole list.
pub(super) fn templates_of_both_schemas_list_together_as_v1alpha1(a: &Admission<'_>) {
    let go = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": "go-edge"},
        "spec": {"image": "firewall-ubuntu-3.0", "size": "v1-small-x86", "networks": ["internet-mini-lab"],
                 "partition": "mini-lab", "project": "00000000-0000-0000-0000-000000000001",
                 "initialRuleSet": {"egress": [{"protocol": "TCP", "ports": [443], "to": ["0.0.0.0/0"]}]}}});
    a.admitted("go-edge.json", go);
    let resource = "metalstackfirewalltemplates.v1alpha1.infrastructure.cluster.x-k8s.io";
    let listed =
        a.cp.kubectl(&["get", "-n", a.ns, resource, "-o", "json"], &[]);
    let listed: Value = serde_json::from_str(&listed).expect("json");
    let shown: Vec<(String, String, String)> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|t| {
            let text = |p: &str| {
                t.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("-")
                    .to_owned()
            };
            (
                text("/metadata/name"),
                text("/spec/partition"),
                text("/spec/project"),
            )
        })
        .collect();
    let project = "00000000-0000-0000-0000-000000000001";
    let expected = [
        ("edge", "", ""),
        ("edge-underlay", "", ""),
        ("go-edge", "mini-lab", project),
    ];
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(n, p, j)| ((*n).to_owned(), (*p).to_owned(), (*j).to_owned()))
        .collect();
    assert_eq!(shown, expected, "{listed:#}");
    // And as kubectl's table of the Go provider's columns.
    let table = a.cp.kubectl(&["get", "-n", a.ns, resource], &[]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("go-edge ") && l.contains("mini-lab")),
        "{table}"
    );
    assert_eq!(table.lines().count(), 4, "{table}");
}
