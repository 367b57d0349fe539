use super::catalog::Catalog;
use super::rules::*;
use super::*;
use crate::api::{
    ApiEndpoint, EgressRule, FirewallRules, MetalStackClusterSpec, MetalStackFirewallSpec,
    MetalStackMachineSpec,
};
use crate::ownership::OwnerKind;
use crate::sim::inventory::Inventory;
use crate::sim::state::State as SimState;
use axum::http::{Request, StatusCode};
use rand::{Rng, SeedableRng};
use tower::ServiceExt;

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";

fn lab() -> SimState {
    SimState::from_inventory(&Inventory::default_lab()).expect("inventory")
}

fn catalog() -> Catalog {
    lab().catalog()
}

fn cluster_spec() -> MetalStackClusterSpec {
    MetalStackClusterSpec {
        control_plane_endpoint: None,
        partition: "mini-lab".into(),
        project_id: PROJECT.into(),
        public_network_id: "internet-mini-lab".into(),
        private_network_id: None,
        firewall_spec: Some(MetalStackFirewallSpec {
            image: "firewall-ubuntu-3.0".into(),
            machine_type: "v1-small-x86".into(),
            ..Default::default()
        }),
        firewall_template_ref: None,
    }
}

fn machine_spec() -> MetalStackMachineSpec {
    MetalStackMachineSpec {
        image: "ubuntu-26.4".into(),
        machine_type: "v1-small-x86".into(),
        partition: Some("mini-lab".into()),
        ..Default::default()
    }
}

fn errors_of(f: impl FnOnce(&mut Report)) -> Vec<String> {
    let mut report = Report::default();
    f(&mut report);
    report.errors.iter().map(ToString::to_string).collect()
}

// ---- defaults -----------------------------------------------------------------------------

#[test]
fn defaults_port_protocol_and_partition() {
    let mut spec = cluster_spec();
    spec.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("127.100.0.9".into()),
        port: None,
    });
    spec.firewall_spec.as_mut().expect("fw").rules = Some(FirewallRules {
        egress: vec![EgressRule {
            ports: vec![443],
            to: vec!["0.0.0.0/0".into()],
            ..Default::default()
        }],
        ingress: vec![],
    });
    default_cluster(&mut spec);
    assert_eq!(
        spec.control_plane_endpoint.as_ref().and_then(|e| e.port),
        Some(6443)
    );
    let rules = spec
        .firewall_spec
        .as_ref()
        .and_then(|f| f.rules.clone())
        .expect("rules");
    assert_eq!(rules.egress[0].protocol, Some(crate::api::Protocol::Tcp));

    let mut explicit = cluster_spec();
    explicit.control_plane_endpoint = Some(ApiEndpoint {
        host: None,
        port: Some(443),
    });
    default_cluster(&mut explicit);
    assert_eq!(
        explicit.control_plane_endpoint.and_then(|e| e.port),
        Some(443),
        "an explicit port is kept"
    );

    let mut m = MetalStackMachineSpec {
        partition: None,
        ..machine_spec()
    };
    default_machine(&mut m, Some("mini-lab"));
    assert_eq!(m.partition.as_deref(), Some("mini-lab"));
    let mut m = MetalStackMachineSpec {
        partition: Some("other".into()),
        ..machine_spec()
    };
    default_machine(&mut m, Some("mini-lab"));
    assert_eq!(
        m.partition.as_deref(),
        Some("other"),
        "an explicit partition is kept"
    );
}

// ---- validation ---------------------------------------------------------------------------

#[test]
fn a_good_cluster_and_machine_pass() {
    let c = catalog();
    assert_eq!(
        errors_of(|r| validate_cluster(r, "spec", &cluster_spec(), None, Some(&c))),
        Vec::<String>::new()
    );
    assert_eq!(
        errors_of(|r| validate_machine(r, "spec", &machine_spec(), None, Some(&c), None)),
        Vec::<String>::new()
    );
    let short = MetalStackMachineSpec {
        image: "capms-ubuntu-1.33".into(),
        ..machine_spec()
    };
    assert!(
        errors_of(|r| validate_machine(r, "spec", &short, None, Some(&c), None)).is_empty(),
        "a shorter version resolves"
    );
}

#[test]
fn machine_errors_name_the_field_and_the_valid_choices() {
    let c = catalog();
    let bad = MetalStackMachineSpec {
        image: "ubuntu-99.4".into(),
        machine_type: "v1-huge".into(),
        partition: Some("mars".into()),
        ..machine_spec()
    };
    let errors = errors_of(|r| validate_machine(r, "spec", &bad, None, Some(&c), None));
    assert_eq!(errors.len(), 3, "every error at once: {errors:?}");
    assert!(
        errors[0].starts_with("spec.image: image \"ubuntu-99.4\" does not resolve"),
        "{}",
        errors[0]
    );
    assert!(errors[0].contains("valid machine images: capms-ubuntu-1.33.5, capms-ubuntu-1.34.1, debian-13.0, ubuntu-26.4"), "{}", errors[0]);
    assert_eq!(
        errors[1],
        "spec.machineType: machine type \"v1-huge\" is not a metal-stack size; valid: v1-small-x86"
    );
    assert_eq!(
        errors[2],
        "spec.partition: partition \"mars\" does not exist in metal-api; valid: mini-lab"
    );

    let firewall_image = MetalStackMachineSpec {
        image: "firewall-ubuntu-3.0".into(),
        ..machine_spec()
    };
    let errors = errors_of(|r| validate_machine(r, "spec", &firewall_image, None, Some(&c), None));
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].contains("has features [firewall], not machine; valid machine images:"),
        "{}",
        errors[0]
    );
}

#[test]
fn cluster_errors_cover_project_networks_and_endpoint() {
    let mut state = lab();
    let private = state
        .network_allocate(&crate::metal::types::NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            ..Default::default()
        })
        .expect("network")
        .id;
    let c = state.catalog();
    let mut spec = cluster_spec();
    spec.public_network_id = "tenant-super-network-mini-lab".into();
    spec.project_id = "00000000-0000-0000-0000-0000000000ff".into();
    let errors = errors_of(|r| validate_cluster(r, "spec", &spec, None, Some(&c)));
    assert!(
        errors.iter().any(|e| e.starts_with(
            "spec.projectID: project \"00000000-0000-0000-0000-0000000000ff\" does not exist"
        ) && e.contains("sample-project")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with("spec.publicNetworkID: network \"tenant-super-network-mini-lab\" is not an external network") && e.contains("valid external networks: internet-mini-lab")),
        "{errors:?}"
    );

    let mut spec = cluster_spec();
    spec.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("10.9.9.9".into()),
        port: None,
    });
    spec.private_network_id = Some("internet-mini-lab".into());
    let errors = errors_of(|r| validate_cluster(r, "spec", &spec, None, Some(&c)));
    assert!(
        errors.iter().any(|e| e
            .starts_with("spec.controlPlaneEndpoint.host: 10.9.9.9 is not in the public network")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with(
            "spec.privateNetworkID: network \"internet-mini-lab\" is not a private network"
        ) && e.contains(&private)),
        "{errors:?}"
    );

    let mut good = cluster_spec();
    good.private_network_id = Some(private);
    good.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("127.100.0.9".into()),
        port: Some(6443),
    });
    assert!(errors_of(|r| validate_cluster(r, "spec", &good, None, Some(&c))).is_empty());
}

#[test]
fn firewall_rules_and_provider_ids_are_checked() {
    let mut state = lab();
    let c0 = state.catalog();
    let mut fw = MetalStackFirewallSpec {
        image: "ubuntu-26.4".into(),
        machine_type: "v1-small-x86".into(),
        rules: Some(FirewallRules {
            egress: vec![EgressRule {
                ports: vec![53],
                to: vec!["0.0.0.0/0".into(), "::/0".into()],
                ..Default::default()
            }],
            ingress: vec![],
        }),
        networks: vec!["nowhere".into()],
        provider_id: Some("metal://other/00000000-0000-0000-0000-000000000001".into()),
        ..Default::default()
    };
    let errors =
        errors_of(|r| validate_firewall(r, "spec", &fw, None, Some("mini-lab"), Some(&c0), None));
    for expected in [
        "spec.rules.egress[0].to: mixes IPv4 and IPv6",
        "spec.image: image \"ubuntu-26.4\" resolves to ubuntu-26.4 which has features [machine], not firewall; valid firewall images: firewall-ubuntu-3.0",
        "spec.networks[0]: network \"nowhere\" does not exist",
        "spec.providerID: names partition \"other\" but machine 00000000-0000-0000-0000-000000000001 is in partition \"mini-lab\"",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "missing {expected:?} in {errors:?}"
        );
    }

    // A preset machine allocated to someone else is refused; to this very object it is fine.
    let net = state
        .network_allocate(&crate::metal::types::NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            ..Default::default()
        })
        .expect("network")
        .id;
    let marks = crate::ownership::owner_marks(OwnerKind::Firewall, "ns", "fw", "uid-1");
    let req = crate::metal::types::MachineAllocateRequest {
        uuid: Some("00000000-0000-0000-0000-000000000002".into()),
        projectid: PROJECT.into(),
        imageid: "firewall-ubuntu-3.0".into(),
        networks: Some(vec![crate::metal::types::AllocationNetwork {
            networkid: net,
            autoacquire: None,
        }]),
        tags: crate::ownership::owner_tags(&marks),
        ..Default::default()
    };
    state
        .machine_allocate(&req, None, "firewall", "test")
        .expect("allocated");
    let c = state.catalog();
    fw = MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        provider_id: Some("metalstack://00000000-0000-0000-0000-000000000002".into()),
        ..Default::default()
    };
    let errors = errors_of(|r| validate_firewall(r, "spec", &fw, None, None, Some(&c), None));
    assert!(
        errors.iter().any(|e| e.starts_with(
            "spec.providerID: machine 00000000-0000-0000-0000-000000000002 is already allocated"
        )),
        "{errors:?}"
    );
    assert!(
        errors_of(|r| validate_firewall(r, "spec", &fw, None, None, Some(&c), Some(&marks)))
            .is_empty(),
        "its own machine"
    );
}

#[test]
fn immutability_after_allocation_and_of_templates() {
    let c = catalog();
    let old = cluster_spec();
    let mut new = cluster_spec();
    new.partition = "elsewhere".into();
    new.public_network_id = "other".into();
    let errors = errors_of(|r| validate_cluster(r, "spec", &new, Some(&old), None));
    assert!(
        errors.contains(&"spec.partition: is immutable once set".to_owned()),
        "{errors:?}"
    );
    assert!(
        errors.contains(&"spec.publicNetworkID: is immutable once set".to_owned()),
        "{errors:?}"
    );
    // capms itself fills an empty endpoint: allowed.
    let mut filled = cluster_spec();
    filled.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("127.100.0.1".into()),
        port: Some(6443),
    });
    assert!(errors_of(|r| validate_cluster(r, "spec", &filled, Some(&old), Some(&c))).is_empty());

    let unallocated = machine_spec();
    let mut allocated = machine_spec();
    allocated.provider_id = Some("metal://mini-lab/00000000-0000-0000-0000-000000000003".into());
    assert!(
        errors_of(|r| validate_machine(r, "spec", &allocated, Some(&unallocated), None, None))
            .is_empty(),
        "capms writes the providerID"
    );
    let mut changed = allocated.clone();
    changed.image = "debian-13.0".into();
    let errors = errors_of(|r| validate_machine(r, "spec", &changed, Some(&allocated), None, None));
    assert_eq!(
        errors,
        [
            "spec.image: is immutable once the machine is allocated; create a new MetalStackMachine instead"
        ]
    );

    let a = json!({"template": {"spec": {"image": "a"}}});
    let b = json!({"template": {"spec": {"image": "b"}}});
    assert_eq!(
        errors_of(|r| validate_template_update(r, &a, &b, false)).len(),
        1
    );
    assert!(
        errors_of(|r| validate_template_update(r, &a, &b, true)).is_empty(),
        "ClusterClass dry run"
    );
    assert!(errors_of(|r| validate_template_update(r, &a, &a, false)).is_empty());
}

#[test]
fn firewall_templates_name_no_machine_and_clusters_take_a_spec_or_a_template() {
    let c = catalog();
    let good = MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        ..Default::default()
    };
    assert_eq!(
        errors_of(|r| validate_firewall_template(r, "spec.template.spec", &good, Some(&c))),
        Vec::<String>::new()
    );
    let pinned = MetalStackFirewallSpec {
        provider_id: Some("metal://mini-lab/00000000-0000-0000-0000-0000000000f1".into()),
        image: "nope".into(),
        ..good.clone()
    };
    let errors =
        errors_of(|r| validate_firewall_template(r, "spec.template.spec", &pinned, Some(&c)));
    assert!(
        errors[0].starts_with("spec.template.spec.providerID: a template cannot name a machine"),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("spec.template.spec.image: image \"nope\"")),
        "the firewall rules apply to the template's spec too: {errors:?}"
    );

    let mut both = cluster_spec();
    both.firewall_template_ref = Some(crate::api::LocalObjectReference {
        name: "edge".into(),
    });
    let errors = errors_of(|r| validate_cluster(r, "spec", &both, None, Some(&c)));
    assert_eq!(
        errors,
        [
            "spec.firewallTemplateRef: set either firewallSpec (the firewall inline) or firewallTemplateRef (a MetalStackFirewallTemplate), not both"
        ]
    );
    both.firewall_spec = None;
    assert_eq!(
        errors_of(|r| validate_cluster(r, "spec", &both, None, Some(&c))),
        Vec::<String>::new()
    );
}

// ---- handlers -----------------------------------------------------------------------------

fn state_with(catalog: Option<Catalog>, deny: bool) -> WebhookState {
    let client = crate::metal::Client::new(crate::metal::Config::new(
        url::Url::parse("http://127.0.0.1:9/").expect("url"),
        crate::metal::Auth::None,
    ))
    .expect("client");
    let cache = match catalog {
        Some(c) => CatalogCache::with_catalog(client, c),
        None => CatalogCache::new(client),
    };
    WebhookState {
        client: None,
        catalog: cache,
        deny_when_metal_unreachable: deny,
        metrics: Default::default(),
    }
}

fn review(kind: &str, operation: &str, object: Value, old: Option<Value>, dry_run: bool) -> Value {
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

async fn call(state: WebhookState, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
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

fn machine_object(spec: Value) -> Value {
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
            kind: Kind::Machine,
            step: Step::Validate,
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
            kind: Kind::Cluster,
            step: Step::Mutate,
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
        kind: Kind::Machine,
        step: Step::Validate,
    }
    .path();
    let (_, out) = call(state_with(None, false), &path, body.clone()).await;
    assert_eq!(out["response"]["allowed"], true);
    assert!(
        out["response"]["warnings"][0]
            .as_str()
            .expect("warning")
            .contains("metal-api cannot be reached")
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
        kind: Kind::MachineTemplate,
        step: Step::Validate,
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

#[tokio::test]
async fn firewall_templates_are_defaulted_checked_and_immutable() {
    let state = state_with(Some(catalog()), false);
    let template = |spec: Value| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackFirewallTemplate",
            "metadata": {"name": "edge", "namespace": "default"}, "spec": {"template": {"spec": spec}}})
    };
    let spec = json!({"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86",
        "rules": {"egress": [{"ports": [443], "to": ["0.0.0.0/0"]}]}});
    let route = |step| Route {
        kind: Kind::FirewallTemplate,
        step,
    };
    let body = |op: &str, object: Value, old: Option<Value>| {
        serde_json::to_vec(&review(
            "MetalStackFirewallTemplate",
            op,
            object,
            old,
            false,
        ))
        .expect("json")
    };

    let (_, out) = call(
        state.clone(),
        &route(Step::Mutate).path(),
        body("CREATE", template(spec.clone()), None),
    )
    .await;
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

    let (_, out) = call(
        state.clone(),
        &route(Step::Validate).path(),
        body("CREATE", template(spec.clone()), None),
    )
    .await;
    assert_eq!(out["response"]["allowed"], true, "{out}");

    let mut pinned = spec.clone();
    pinned["providerID"] = json!("metal://mini-lab/00000000-0000-0000-0000-0000000000f1");
    let (_, out) = call(
        state.clone(),
        &route(Step::Validate).path(),
        body("CREATE", template(pinned), None),
    )
    .await;
    assert_eq!(out["response"]["allowed"], false);

    let mut changed = spec.clone();
    changed["machineType"] = json!("c1-large-x86");
    let (_, out) = call(
        state,
        &route(Step::Validate).path(),
        body("UPDATE", template(changed), Some(template(spec))),
    )
    .await;
    assert!(
        out["response"]["status"]["message"]
            .as_str()
            .expect("message")
            .starts_with("spec.template: templates are immutable")
    );
}

#[tokio::test]
async fn malformed_and_foreign_reviews_get_well_formed_denials() {
    let state = state_with(Some(catalog()), false);
    let path = Route {
        kind: Kind::Cluster,
        step: Step::Validate,
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

fn random_json(rng: &mut rand::rngs::StdRng, depth: u32) -> Value {
    match rng.random_range(0..if depth > 3 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!(rng.random_range(-100_000i64..100_000)),
        3 => json!(
            [
                "mini-lab",
                "ubuntu-26.4",
                "",
                "metal://x/y",
                "127.100.0.1",
                "💥",
                "v1-small-x86"
            ][rng.random_range(0..7)]
        ),
        4 => json!(rng.random_range(0.0..1.0)),
        5 => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| random_json(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let keys = [
                "spec",
                "image",
                "machineType",
                "partition",
                "providerID",
                "template",
                "controlPlaneEndpoint",
                "host",
                "port",
                "firewallSpec",
                "rules",
                "egress",
                "to",
                "metadata",
                "name",
            ];
            Value::Object(
                (0..rng.random_range(0..5))
                    .map(|_| {
                        (
                            keys[rng.random_range(0..keys.len())].to_owned(),
                            random_json(rng, depth + 1),
                        )
                    })
                    .collect(),
            )
        }
    }
}

#[tokio::test]
async fn arbitrary_bytes_and_objects_never_panic_or_fail_with_5xx() {
    let state = state_with(Some(catalog()), false);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xCA9_5EED);
    for route in routes() {
        for i in 0..150 {
            let body = match i % 3 {
                0 => (0..rng.random_range(0..200))
                    .map(|_| rng.random::<u8>())
                    .collect(),
                1 => serde_json::to_vec(&random_json(&mut rng, 0)).expect("json"),
                _ => {
                    let mut object = random_json(&mut rng, 0);
                    if let Value::Object(o) = &mut object {
                        o.insert(
                            "apiVersion".into(),
                            json!("infrastructure.cluster.x-k8s.io/v1alpha4"),
                        );
                        o.insert("kind".into(), json!(route.kind.name()));
                        o.insert(
                            "metadata".into(),
                            json!({"name": "fuzz", "namespace": "default"}),
                        );
                    }
                    let op = ["CREATE", "UPDATE", "DELETE", "CONNECT"][rng.random_range(0..4)];
                    serde_json::to_vec(&review(
                        route.kind.name(),
                        op,
                        object.clone(),
                        Some(object),
                        rng.random_bool(0.5),
                    ))
                    .expect("json")
                }
            };
            let (status, out) = call(state.clone(), &route.path(), body).await;
            assert!(
                status.is_success(),
                "{} answered {status} to input {i}",
                route.path()
            );
            assert!(
                out["response"]["allowed"].is_boolean(),
                "{} gave no verdict: {out}",
                route.path()
            );
        }
    }
}

#[test]
fn webhook_configurations_come_from_the_route_table() {
    let [mutating, validating] = webhook_configurations(
        &ClientConfig::Url {
            base: "https://127.0.0.1:9443".into(),
            ca_bundle: b"CA".to_vec(),
        },
        None,
    );
    let paths = |c: &Value| -> Vec<String> {
        c["webhooks"]
            .as_array()
            .expect("webhooks")
            .iter()
            .map(|w| w["clientConfig"]["url"].as_str().expect("url").to_owned())
            .collect()
    };
    let mounted: Vec<String> = routes()
        .iter()
        .map(|r| format!("https://127.0.0.1:9443{}", r.path()))
        .collect();
    for p in paths(&mutating).iter().chain(&paths(&validating)) {
        assert!(mounted.contains(p), "{p} is not mounted");
    }
    assert_eq!(
        paths(&validating).len(),
        6,
        "one validating webhook per kind"
    );
    for w in validating["webhooks"].as_array().expect("webhooks") {
        assert_eq!(
            (w["failurePolicy"].as_str(), w["sideEffects"].as_str()),
            (Some("Fail"), Some("None"))
        );
        assert_eq!(
            w["rules"][0]["operations"],
            json!(["CREATE", "UPDATE"]),
            "deletion is never sent, so never blocked"
        );
    }
}
