use super::engine::{dotted, put};
use super::kinds::{ConvertedKind, FIREWALL_TEMPLATE, Field};
use super::{KEPT_ANNOTATION, Refusal, Schema, convert};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

mod fields;
mod review;

const ROUND_TRIPS: usize = 1000;

fn api_version(version: &str) -> String {
    format!("infrastructure.cluster.x-k8s.io/{version}")
}

/// A value of a random shape: what the engine moves it must move whole, whatever it is.
fn any_value(rng: &mut StdRng, depth: u32) -> Value {
    match rng.random_range(0..if depth > 1 { 4 } else { 6 }) {
        0 => Value::String(format!("s{}", rng.random_range(0..5))),
        1 => json!(rng.random_range(-2..1000)),
        2 => Value::Bool(rng.random()),
        3 => Value::String(String::new()),
        4 => Value::Array(
            (0..rng.random_range(0..3))
                .map(|_| any_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let map: Map<String, Value> = (0..rng.random_range(0..3))
                .map(|i| (format!("k{i}"), any_value(rng, depth + 1)))
                .collect();
            Value::Object(map)
        }
    }
}

/// A rule set as both schemas write it, with protocols in any case.
fn any_rules(rng: &mut StdRng) -> Value {
    let protocols = ["TCP", "UDP", "tcp", "udp", "Tcp"];
    let mut rule = |peer: &str| {
        let protocol = protocols[rng.random_range(0..protocols.len())];
        json!({"protocol": protocol, "ports": [rng.random_range(1..65535)], peer: ["10.0.0.0/8"]})
    };
    json!({"egress": [rule("to")], "ingress": [rule("from"), rule("from")]})
}

/// Conditions of types both schemas name, each present or not, in any order.
fn any_conditions(rng: &mut StdRng) -> Value {
    let types = [
        "Ready",
        "Paused",
        "NetworkReady",
        "ClusterNodeNetworkEnsured",
        "FirewallReady",
        "ClusterFirewallDeploymentEnsured",
        "ControlPlaneIPReady",
        "ClusterControlPlaneIPEnsured",
        "MachineAllocated",
        "MachineCreated",
        "MachineReady",
        "MachineHealthy",
    ];
    let list: Vec<Value> = (0..rng.random_range(0..6))
        .map(|_| {
            let t = types[rng.random_range(0..types.len())];
            json!({"type": t, "status": if rng.random() { "True" } else { "False" }, "reason": "R"})
        })
        .collect();
    Value::Array(list)
}

/// A random object of `kind` in `version`: each field of its schema present or not.
fn any_object(rng: &mut StdRng, kind: &'static ConvertedKind, version: &str) -> Value {
    let schema = Schema::of(version).unwrap_or(Schema::Capms);
    let mut object = json!({
        "apiVersion": api_version(version),
        "kind": kind.name,
        "metadata": {"name": format!("o{}", rng.random_range(0..100)), "namespace": "default"},
        "spec": {},
    });
    if rng.random_bool(0.3) {
        object["metadata"]["annotations"] = json!({"a": "b"});
    }
    for field in kind.fields() {
        let Some(path) = field.path(schema) else {
            continue;
        };
        if !kind.required(schema).contains(&path) && rng.random_bool(0.4) {
            continue;
        }
        let value = if path.ends_with("initialRuleSet") || path.ends_with("rules") {
            any_rules(rng)
        } else if path.ends_with("conditions") && rng.random_bool(0.8) {
            any_conditions(rng)
        } else {
            any_value(rng, 0)
        };
        put(&mut object, path, Some(value), "generated").unwrap_or_else(|e| panic!("{e}"));
    }
    object
}

#[test]
fn an_endpoint_of_only_a_port_is_not_shown_in_v1alpha1_and_comes_back() {
    let hub = json!({"apiVersion": api_version("v1alpha4"), "kind": "MetalStackCluster",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"partition": "p", "projectID": "x", "controlPlaneEndpoint": {"port": 443}}});
    let go = convert(&hub, &api_version("v1alpha1")).expect("converted");
    assert_eq!(go["spec"].get("controlPlaneEndpoint"), None, "{go:#}");
    assert_eq!(convert(&go, &api_version("v1alpha4")), Ok(hub.clone()));
    let mut allocated = hub;
    allocated["spec"]["controlPlaneEndpoint"] = json!({"host": "127.100.0.7", "port": 443});
    let go = convert(&allocated, &api_version("v1alpha1")).expect("converted");
    assert_eq!(
        go["spec"]["controlPlaneEndpoint"],
        json!({"host": "127.100.0.7", "port": 443})
    );
}

/// Every generated object has each field its version requires, so every one converts to every
/// other version and back: a refusal or a loss fails, and the successes are counted per kind
/// and pair of versions, so that a conversion refusing everything cannot pass.
#[test]
fn round_trips_through_every_other_version_give_back_the_object() {
    let mut rng = StdRng::seed_from_u64(28);
    let versions = ["v1alpha1", "v1alpha3", "v1alpha4"];
    let mut round_trips = std::collections::BTreeMap::new();
    for kind in ConvertedKind::ALL {
        for from in versions {
            for via in versions.iter().filter(|v| **v != from) {
                for _ in 0..ROUND_TRIPS {
                    let object = any_object(&mut rng, kind, from);
                    let there = convert(&object, &api_version(via))
                        .unwrap_or_else(|e| panic!("{} {from} → {via}: {e}", kind.name));
                    let back = convert(&there, &api_version(from));
                    assert_eq!(
                        back.as_ref(),
                        Ok(&object),
                        "{} {from} → {via} → {from}: {there:#}",
                        kind.name
                    );
                    *round_trips.entry((kind.name, from, *via)).or_insert(0) += 1;
                }
            }
        }
    }
    assert_eq!(
        round_trips.len(),
        ConvertedKind::ALL.len() * 6,
        "{round_trips:?}"
    );
    for (pair, count) in round_trips {
        assert_eq!(count, ROUND_TRIPS, "round trips of {pair:?}");
    }
}

/// A firewall template made in capms's versions names no partition, project or networks (capms
/// allocates in the cluster's), all of which `v1alpha1` requires: shown there as empty, so
/// that a list read as `v1alpha1` never fails for it, and converted back to what it was.
#[test]
fn a_capms_firewall_template_shows_in_v1alpha1_with_an_empty_partition_and_project() {
    let hub = json!({"apiVersion": api_version("v1alpha4"), "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": "fw", "namespace": "default"},
        "spec": {"template": {"spec": {"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86"}}}});
    let go = convert(&hub, &api_version("v1alpha1")).expect("shown in v1alpha1");
    assert_eq!(
        go["spec"],
        json!({"image": "firewall-ubuntu-3.0", "size": "v1-small-x86", "networks": [],
               "partition": "", "project": ""})
    );
    assert_eq!(
        go["metadata"].get("annotations"),
        None,
        "nothing kept: {go:#}"
    );
    assert_eq!(convert(&go, &api_version("v1alpha4")), Ok(hub));
    // The Go provider's own template keeps its partition and project through capms's versions.
    let mut named = go.clone();
    named["spec"]["partition"] = json!("mini-lab");
    named["spec"]["project"] = json!("p");
    let up = convert(&named, &api_version("v1alpha4")).expect("up");
    assert_eq!(convert(&up, &api_version("v1alpha1")), Ok(named));
}

#[test]
fn a_field_changed_in_the_other_version_keeps_the_change() {
    let hub = json!({
        "apiVersion": api_version("v1alpha4"), "kind": "MetalStackCluster",
        "metadata": {"name": "c", "namespace": "n"},
        "spec": {"partition": "p", "projectID": "x"},
        "status": {"networkID": "allocated"},
    });
    let mut spoke = convert(&hub, &api_version("v1alpha1")).unwrap_or_default();
    assert_eq!(spoke["spec"]["nodeNetworkID"], "allocated", "{spoke:#}");
    spoke["spec"]["nodeNetworkID"] = json!("given");
    let back = convert(&spoke, &api_version("v1alpha4")).unwrap_or_default();
    assert_eq!(back["spec"]["privateNetworkID"], "given", "{back:#}");
    assert_eq!(back["status"]["networkID"], "allocated", "{back:#}");
}

#[test]
fn refusals_name_the_object_and_the_field() {
    // A machine without the image both schemas require (the apiserver stores none such).
    let hub = json!({
        "apiVersion": api_version("v1alpha4"), "kind": "MetalStackMachine",
        "metadata": {"name": "m", "namespace": "n"},
        "spec": {"machineType": "m"},
    });
    let refusal = convert(&hub, &api_version("v1alpha1"))
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        refusal.as_deref(),
        Some(
            "cannot convert MetalStackMachine n/m to v1alpha1: v1alpha1 requires spec.image, which it has no value for"
        )
    );
    let unknown = convert(&hub, &api_version("v1beta1"))
        .err()
        .map(|e| e.to_string());
    assert!(unknown.is_some_and(
        |m| m.contains("v1beta1") && m.contains("infrastructure.cluster.x-k8s.io/v1alpha1")
    ));
    // A version of another group, or of none, is no version of these kinds.
    for version in ["cluster.x-k8s.io/v1alpha4", "v1alpha4"] {
        let refused = convert(&hub, version).err();
        assert!(
            matches!(refused, Some(Refusal::UnknownVersion { version: ref v, .. }) if v == version),
            "{refused:?}"
        );
    }
    let crossing = json!({
        "apiVersion": api_version("v1alpha4"), "kind": "MetalStackCluster",
        "metadata": {"name": "c", "namespace": "n", "annotations": "not an object"},
        "spec": {"partition": "p", "projectID": "x", "publicNetworkID": "internet"},
    });
    let refusal = convert(&crossing, &api_version("v1alpha1")).err();
    let field = "metadata.annotations";
    assert!(
        matches!(refusal, Some(Refusal::NotAnObject { field: ref f, .. }) if f == field),
        "{refusal:?}"
    );
    let mut bad = hub;
    bad["metadata"]["annotations"] = json!({KEPT_ANNOTATION: "{"});
    let refusal = convert(&bad, &api_version("v1alpha1")).err();
    assert!(
        matches!(refusal, Some(Refusal::BadKeptAnnotation { .. })),
        "{refusal:?}"
    );
}

#[test]
fn versions_of_one_schema_only_relabel() {
    let hub = json!({
        "apiVersion": api_version("v1alpha4"), "kind": "MetalStackFirewall",
        "metadata": {"name": "f"}, "spec": {"image": "i", "machineType": "m"},
    });
    let legacy = convert(&hub, &api_version("v1alpha3")).unwrap_or_default();
    assert_eq!(legacy["apiVersion"], api_version("v1alpha3"));
    assert_eq!(legacy["spec"], hub["spec"]);
    let across = convert(&hub, &api_version("v1alpha1")).err();
    assert!(
        matches!(across, Some(Refusal::UnknownKind { .. })),
        "{across:?}"
    );
}

/// The property paths of a CRD version's schema, as JSON pointers.
fn schema_paths(schema: &Value, at: &str, out: &mut BTreeSet<String>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        let path = format!("{at}/{name}");
        out.insert(path.clone());
        schema_paths(property, &path, out);
    }
}

fn crd_paths(crd: &Value, version: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    for served in versions
        .into_iter()
        .flatten()
        .filter(|v| v["name"] == version)
    {
        let root = served
            .pointer("/schema/openAPIV3Schema")
            .unwrap_or(&Value::Null);
        schema_paths(root, "", &mut out);
    }
    out
}

/// Every path of the schema is a table field, inside one, or on the way to one; every table
/// field is in the schema.
fn assert_table_covers(kind: &'static ConvertedKind, schema: Schema, paths: &BTreeSet<String>) {
    let fields: Vec<&str> = kind
        .fields()
        .filter_map(|f: &Field| f.path(schema))
        .collect();
    for path in paths {
        let top = ["/apiVersion", "/kind", "/metadata", "/spec", "/status"];
        let covered = top.contains(&path.as_str())
            || path.starts_with("/metadata/")
            || fields.iter().any(|f| {
                path == f
                    || path.starts_with(&format!("{f}/"))
                    || f.starts_with(&format!("{path}/"))
            });
        assert!(
            covered,
            "{} {schema:?}: {} is in no conversion field",
            kind.name,
            dotted(path)
        );
    }
    for field in fields {
        assert!(
            paths.contains(field),
            "{} {schema:?}: {field} is not in the CRD",
            kind.name
        );
    }
}

#[test]
fn the_tables_cover_every_field_of_both_schemas() {
    for kind in ConvertedKind::ALL {
        let ours = crate::api::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == kind.name);
        let ours = serde_json::to_value(ours).unwrap_or_default();
        assert_table_covers(kind, Schema::Capms, &crd_paths(&ours, "v1alpha4"));

        let plural = format!("{}s", kind.name.to_lowercase());
        let go = crate::api::v1alpha1::go_provider_crd(&plural);
        let paths = crd_paths(&go, "v1alpha1");
        assert_table_covers(kind, Schema::GoProvider, &paths);
    }
    // The Go provider's firewall template has a status subresource but no status in its schema:
    // the apiserver prunes any, so its table has no status field to carry.
    let template = crate::api::v1alpha1::go_provider_crd("metalstackfirewalltemplates");
    let status = template.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/status");
    assert_eq!(status, None);
    assert!(
        FIREWALL_TEMPLATE
            .fields()
            .all(|f| f.go.is_none_or(|p| !p.starts_with("/status")))
    );
}

/// `value` read as `T`, or the serde error naming the path that does not fit.
fn typed<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|e| format!("{e}: {value:#}"))
}

#[test]
fn converted_objects_read_as_the_target_versions_types() {
    use crate::api::{self, v1alpha1};
    let hub = json!({
        "apiVersion": api_version("v1alpha4"), "kind": "MetalStackMachine",
        "metadata": {"name": "m", "namespace": "n"},
        "spec": {"image": "ubuntu-24.04", "machineType": "c1-large-x86", "sshKeys": ["ssh-ed25519 AAAA"],
                 "providerID": "metal://p/00000000-0000-0000-0000-000000000001"},
        "status": {"ready": true, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
    });
    let go = convert(&hub, &api_version("v1alpha1")).unwrap_or_default();
    let machine = typed::<v1alpha1::MetalStackMachine>(&go);
    assert_eq!(machine.map(|m| m.spec.size), Ok("c1-large-x86".to_owned()));
    let back = convert(&go, &api_version("v1alpha4")).unwrap_or_default();
    let parts = |m: api::MetalStackMachine| (m.spec, m.status);
    let (back, hub) = (typed(&back).map(parts), typed(&hub).map(parts));
    assert!(back.is_ok() && back == hub, "{back:?}");

    let template = json!({
        "apiVersion": api_version("v1alpha1"), "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": "fw", "namespace": "n"},
        "spec": {"image": "firewall-ubuntu-3.0", "size": "c1-large-x86", "networks": ["internet"],
                 "partition": "p", "project": "x",
                 "initialRuleSet": {
                     "egress": [{"comment": "allow outgoing DNS", "ports": [53], "protocol": "UDP", "to": ["0.0.0.0/0"]}],
                     "ingress": [{"ports": [443], "protocol": "TCP", "from": ["0.0.0.0/0"]}]}},
    });
    assert!(typed::<v1alpha1::MetalStackFirewallTemplate>(&template).is_ok());
    let hub = convert(&template, &api_version("v1alpha4")).unwrap_or_default();
    let hub = typed::<api::MetalStackFirewallTemplate>(&hub);
    let rules = hub.map(|t| t.spec.template.spec.rules.unwrap_or_default());
    let protocols = rules.map(|r| (r.egress[0].protocol, r.ingress[0].protocol));
    assert_eq!(
        protocols,
        Ok((Some(api::Protocol::Udp), Some(api::Protocol::Tcp)))
    );
}
