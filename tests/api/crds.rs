//! The committed CRDs are what the Rust types generate, and every schema is structural and
//! documented, so `kubectl explain` has something to say about every field.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

fn crds() -> Vec<CustomResourceDefinition> {
    capms::api::crds()
}

#[test]
fn committed_crds_match_the_types() {
    let dir = crate::support::repo_root().join("manifests/crd");
    let files = capms::api::render(crds()).expect("CRDs render as YAML");
    let mut expected_names: Vec<_> = files.iter().map(|(name, _)| name.clone()).collect();
    for (name, yaml) in &files {
        let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| {
            panic!("manifests/crd/{name} is missing ({e}); run `make generate`")
        });
        assert!(
            committed == *yaml,
            "manifests/crd/{name} differs from `capms crds`; run `make generate` and commit the result"
        );
    }
    let mut committed_names: Vec<_> = std::fs::read_dir(&dir)
        .expect("manifests/crd exists")
        .map(|e| {
            e.expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    committed_names.sort();
    expected_names.sort();
    assert_eq!(
        committed_names, expected_names,
        "stale or missing files in manifests/crd"
    );
}

#[test]
fn every_kind_is_there() {
    let crds = crds();
    let kinds: Vec<_> = crds.iter().map(|c| c.spec.names.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "MetalStackCluster",
            "MetalStackClusterTemplate",
            "MetalStackFirewall",
            "MetalStackFirewallDeployment",
            "MetalStackFirewallTemplate",
            "MetalStackMachine",
            "MetalStackMachineTemplate",
            "MetalStackRemediation",
            "MetalStackRemediationTemplate"
        ]
    );
}

/// Names, scope and categories, as the contract and kubectl want them.
#[test]
fn every_kind_has_its_names_and_scope() {
    for crd in &crds() {
        let kind = &crd.spec.names.kind;
        let name = crd.metadata.name.as_deref().unwrap_or_default();
        assert_eq!(
            name,
            format!("{}.infrastructure.cluster.x-k8s.io", crd.spec.names.plural),
            "CRD name must be <plural>.<group> (contract A4)"
        );
        assert_eq!(crd.spec.scope, "Namespaced", "{kind}");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["cluster-api".to_owned()][..]),
            "{kind}"
        );
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
            "{kind} has short names"
        );
    }
}

/// The contract labels list every served version, storage last; clusterctl's labels, and the
/// move label on the kinds no ownerReference chain reaches.
#[test]
fn every_kind_has_the_contract_and_clusterctl_labels() {
    for crd in &crds() {
        let kind = &crd.spec.names.kind;
        let labels = crd.metadata.labels.clone().unwrap_or_default();
        for contract in ["cluster.x-k8s.io/v1beta1", "cluster.x-k8s.io/v1beta2"] {
            let value = labels
                .get(contract)
                .unwrap_or_else(|| panic!("{kind} lacks {contract}"));
            let listed: Vec<_> = value.split('_').collect();
            let stored = crd.spec.versions.iter().find(|v| v.storage);
            assert_eq!(
                listed.last().copied(),
                stored.map(|v| v.name.as_str()),
                "{kind}: storage version listed last"
            );
            for v in listed {
                assert!(
                    crd.spec
                        .versions
                        .iter()
                        .any(|ver| ver.name == v && ver.served),
                    "{kind}: {v} served"
                );
            }
        }
        assert_eq!(
            labels
                .get("clusterctl.cluster.x-k8s.io")
                .map(String::as_str),
            Some(""),
            "{kind}"
        );
        assert_eq!(
            labels.get("cluster.x-k8s.io/provider").map(String::as_str),
            Some("infrastructure-metal-stack"),
            "{kind}"
        );
        // Kinds in no ownerReference chain are moved by clusterctl through this label.
        let moved_by_label = matches!(
            kind.as_str(),
            "MetalStackFirewall"
                | "MetalStackFirewallTemplate"
                | "MetalStackFirewallDeployment"
                | "MetalStackRemediationTemplate"
        );
        assert_eq!(
            labels.contains_key(capms::api::MOVE_LABEL),
            moved_by_label,
            "{kind}"
        );
    }
}

/// capms's kinds serve v1alpha3 (deprecated) and v1alpha4 (stored) with one schema; those the Go
/// provider has serve its v1alpha1 too, converted by the webhook at /convert with the CA from
/// cert-manager. Its MetalStackFirewallDeployment is v1alpha1 alone. Printer columns, and a
/// status subresource on every non-template kind of ours.
#[test]
fn every_kind_serves_its_versions() {
    let go_provider_kinds = [
        "MetalStackCluster",
        "MetalStackMachine",
        "MetalStackMachineTemplate",
        "MetalStackFirewallTemplate",
    ];
    for crd in &crds() {
        let kind = &crd.spec.names.kind;
        let versions: Vec<_> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        if kind == "MetalStackFirewallDeployment" {
            assert_eq!(versions, [("v1alpha1", true, true)]);
            assert!(crd.spec.conversion.is_none(), "{kind}: one version");
            continue;
        }
        let ours = &crd.spec.versions[versions.len() - 2..];
        let [legacy, stored] = ours else {
            unreachable!()
        };
        if go_provider_kinds.contains(&kind.as_str()) {
            assert_eq!(
                versions,
                [
                    ("v1alpha1", true, false),
                    ("v1alpha3", true, false),
                    ("v1alpha4", true, true)
                ],
                "{kind}"
            );
            converted_by_the_webhook(crd);
        } else {
            assert_eq!(
                versions,
                [("v1alpha3", true, false), ("v1alpha4", true, true)],
                "{kind}"
            );
            assert!(crd.spec.conversion.is_none(), "{kind}: no conversion");
        }
        assert_eq!(
            legacy.deprecated,
            Some(true),
            "{kind}: v1alpha3 is deprecated"
        );
        assert_eq!(
            legacy.schema, stored.schema,
            "{kind}: both versions share one schema"
        );
        assert_eq!(
            legacy.additional_printer_columns,
            stored.additional_printer_columns
        );

        let columns: Vec<_> = stored
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert!(columns.contains(&"Age"), "{kind} columns {columns:?}");
        let is_template = kind.ends_with("Template");
        if !is_template {
            assert!(
                columns.contains(&"Ready") && columns.contains(&"Cluster"),
                "{kind} columns {columns:?}"
            );
            let status = stored.subresources.as_ref().and_then(|s| s.status.as_ref());
            assert!(status.is_some(), "{kind} has a status subresource");
        }
    }
}

/// The conversion webhook: capms's Service, /convert, ConversionReview v1, the CA injected.
fn converted_by_the_webhook(crd: &CustomResourceDefinition) {
    let kind = &crd.spec.names.kind;
    let conversion = crd.spec.conversion.as_ref().expect("conversion");
    assert_eq!(conversion.strategy, "Webhook", "{kind}");
    let webhook = conversion.webhook.as_ref().expect("webhook");
    assert_eq!(webhook.conversion_review_versions, ["v1"]);
    let service = webhook
        .client_config
        .as_ref()
        .and_then(|c| c.service.as_ref())
        .expect("service");
    assert_eq!(
        (
            service.namespace.as_str(),
            service.name.as_str(),
            service.path.as_deref()
        ),
        ("capms-system", "capms-webhook-service", Some("/convert"))
    );
    let annotations = crd.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("cert-manager.io/inject-ca-from")
            .map(String::as_str),
        Some("capms-system/capms-serving-cert"),
        "{kind}"
    );
}

/// Walks a schema node and collects every violation of Kubernetes' structural rules and of our
/// own rule that every field carries a description.
fn lint(path: &str, node: &Value, problems: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        problems.push(format!("{path}: schema node is not an object"));
        return;
    };
    let exempt = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !exempt
        && obj
            .get("type")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        problems.push(format!("{path}: no type"));
    }
    for forbidden in ["$ref", "uniqueItems", "definitions", "$defs", "$schema"] {
        if obj.contains_key(forbidden) {
            problems.push(format!("{path}: has {forbidden}"));
        }
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        problems.push(format!("{path}: both properties and additionalProperties"));
    }
    for junctor in ["allOf", "anyOf", "oneOf", "not"] {
        if let Some(branches) = obj.get(junctor) {
            let branches = branches
                .as_array()
                .cloned()
                .unwrap_or_else(|| vec![branches.clone()]);
            for b in branches {
                for key in [
                    "type",
                    "description",
                    "default",
                    "nullable",
                    "additionalProperties",
                ] {
                    if b.get(key).is_some() {
                        problems.push(format!("{path}: {key} inside {junctor}"));
                    }
                }
            }
        }
    }
    if let Some(Value::Array(values)) = obj.get("enum") {
        // An enum must list only values of its own type (a null is allowed next to nullable).
        let nullable = obj.get("nullable") == Some(&Value::Bool(true));
        if values.iter().any(|v| v.is_null() && !nullable) {
            problems.push(format!("{path}: enum lists null but is not nullable"));
        }
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (name, child) in props {
            let child_path = format!("{path}.{name}");
            if child
                .get("description")
                .and_then(Value::as_str)
                .is_none_or(|d| d.trim().is_empty())
            {
                problems.push(format!("{child_path}: no description"));
            }
            lint(&child_path, child, problems);
        }
    }
    if let Some(items) = obj.get("items") {
        lint(&format!("{path}[]"), items, problems);
    }
    if let Some(additional @ Value::Object(_)) = obj.get("additionalProperties") {
        lint(&format!("{path}{{}}"), additional, problems);
    }
}

#[test]
fn every_schema_is_structural_and_documented() {
    let mut problems = Vec::new();
    for crd in crds() {
        for version in &crd.spec.versions {
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref());
            let schema = serde_json::to_value(schema.expect("every version has a schema"))
                .expect("serializable");
            let root = format!("{}/{}", crd.spec.names.kind, version.name);
            for part in ["spec", "status"] {
                if let Some(node) = schema.pointer(&format!("/properties/{part}")) {
                    lint(&format!("{root}.{part}"), node, &mut problems);
                }
            }
            if schema.pointer("/properties/spec").is_none() {
                problems.push(format!("{root}: no spec"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "schema problems:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_lint_catches_what_it_should() {
    let bad = serde_json::json!({
        "type": "object",
        "properties": {
            "untyped": {"description": "x"},
            "undocumented": {"type": "string"},
            "both": {"type": "object", "description": "x", "properties": {}, "additionalProperties": {"type": "string"}},
            "junctor": {"type": "string", "description": "x", "anyOf": [{"type": "string"}]}
        }
    });
    let mut problems = Vec::new();
    lint("t", &bad, &mut problems);
    for expected in [
        "t.untyped: no type",
        "t.undocumented: no description",
        "t.both: both",
        "t.junctor: type inside anyOf",
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(expected)),
            "missing {expected:?} in {problems:?}"
        );
    }
}

#[test]
fn immutable_fields_carry_cel_rules() {
    let crd = crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "MetalStackCluster")
        .expect("cluster CRD");
    let schema = serde_json::to_value(&crd.spec.versions[1].schema).expect("serializable");
    for field in ["partition", "projectID"] {
        let rules = schema
            .pointer(&format!(
                "/openAPIV3Schema/properties/spec/properties/{field}/x-kubernetes-validations"
            ))
            .unwrap_or_else(|| panic!("{field} has CEL rules"));
        assert_eq!(rules[0]["rule"], "self == oldSelf");
    }
    let port = schema
        .pointer("/openAPIV3Schema/properties/spec/properties/controlPlaneEndpoint/properties/port")
        .expect("port");
    assert_eq!(
        (port["minimum"].as_f64(), port["maximum"].as_f64()),
        (Some(1.0), Some(65535.0))
    );
}

#[test]
fn committed_webhook_manifests_match_the_route_table() {
    let committed =
        std::fs::read_to_string(crate::support::repo_root().join("webhooks/manifests.yaml"))
            .expect("webhooks/manifests.yaml");
    let generated = capms::webhooks::install_manifests_yaml().expect("renders");
    assert!(
        committed == generated,
        "webhooks/manifests.yaml differs from `capms webhooks`; run `make generate` and commit the result"
    );
}
