//! Our CRDs on a real kube-apiserver, and the real Cluster API core manager adopting a
//! MetalStackCluster.

use crate::support;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use std::time::Duration;
use support::{
    ControlPlane, ManagerOn, eventually, repo_root, spawn_core_manager, wait_established,
};

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/seed000").join(name))
        .expect("fixture");
    serde_saphyr::from_str(&text).expect("fixture is YAML")
}

fn api_for(client: &kube::Client, ns: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", version, kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

/// The seed's three kinds, created in both served versions, come back as written, take the
/// reconciled status and read the same through the other version.
#[tokio::test]
async fn crds_establish_and_seed_objects_round_trip_in_both_versions() {
    let cp = ControlPlane::shared();
    let client = cp.client().await;
    let names: Vec<String> = capms::api::crds()
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names.len(), 9, "{names:?}");
    wait_established(&client, &names).await;
    let ns = cp.namespace("crds").await;
    for (kind, initial, reconciled) in [
        (
            "MetalStackCluster",
            "metalstackcluster-initial.yaml",
            "metalstackcluster-reconciled.yaml",
        ),
        (
            "MetalStackMachine",
            "metalstackmachine-initial.yaml",
            "metalstackmachine-reconciled.yaml",
        ),
        (
            "MetalStackFirewall",
            "metalstackfirewall-initial.yaml",
            "metalstackfirewall-reconciled.yaml",
        ),
    ] {
        for version in ["v1alpha3", "v1alpha4"] {
            round_trip(&client, &ns.name, kind, (initial, reconciled), version).await;
        }
    }
}

/// One seed object of `kind`, created as `version`.
async fn round_trip(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    (initial, reconciled): (&str, &str),
    version: &str,
) {
    let api = api_for(client, ns, version, kind);
    let mut manifest = fixture(initial);
    let name = format!(
        "{}-{version}",
        manifest["metadata"]["name"].as_str().expect("name")
    );
    manifest["apiVersion"] = json!(format!("infrastructure.cluster.x-k8s.io/{version}"));
    manifest["metadata"]["name"] = json!(name);
    manifest["metadata"]["namespace"] = json!(ns);
    let object: DynamicObject = serde_json::from_value(manifest.clone()).expect("dynamic object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {version}: {e}"));

    let read = api.get(&name).await.expect("read back");
    assert_eq!(
        read.data["spec"], manifest["spec"],
        "{kind} {version}: spec comes back as written"
    );

    // The "after reconciliation" status goes through the status subresource.
    let status = fixture(reconciled)["status"].clone();
    let patch = json!({"status": status});
    let patched = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching the status of {kind} {version}: {e}"));
    assert_eq!(
        patched.data["status"], status,
        "{kind} {version}: status comes back as written"
    );

    // Read through the other version: same object, same data (conversion None).
    let other = if version == "v1alpha3" {
        "v1alpha4"
    } else {
        "v1alpha3"
    };
    let through_other = api_for(client, ns, other, kind)
        .get(&name)
        .await
        .expect("read via other version");
    assert_eq!(through_other.data["spec"], manifest["spec"]);
    assert_eq!(through_other.data["status"], status);

    // And the typed client agrees.
    if kind == "MetalStackCluster" {
        let typed: Api<capms::api::MetalStackCluster> = Api::namespaced(client.clone(), ns);
        let obj = typed.get(&name).await.expect("typed read");
        assert_eq!(obj.spec.partition, "vagrant");
        assert!(obj.status.expect("status").ready);
    }
}

/// The schema is enforced by the apiserver: a change of partition, a bad port, both a
/// firewallSpec and a template, and a template naming a machine are refused.
#[tokio::test]
async fn the_apiserver_enforces_the_schema() {
    let cp = ControlPlane::shared();
    let client = cp.client().await;
    let ns = cp.namespace("schema").await;
    let api = api_for(&client, &ns.name, "v1alpha4", "MetalStackCluster");
    let mut manifest = fixture("metalstackcluster-initial.yaml");
    manifest["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1alpha4");
    manifest["metadata"]["name"] = json!("metal-stack-cluster-v1alpha4");
    manifest["metadata"]["namespace"] = json!(ns.name);
    let object: DynamicObject = serde_json::from_value(manifest).expect("dynamic object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("the seed's cluster");
    let err = api
        .patch(
            "metal-stack-cluster-v1alpha4",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"partition": "other"}})),
        )
        .await
        .expect_err("partition is immutable");
    assert!(err.to_string().contains("partition is immutable"), "{err}");
    let err = api
        .patch(
            "metal-stack-cluster-v1alpha4",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"controlPlaneEndpoint": {"port": 70000}}})),
        )
        .await
        .expect_err("port out of range");
    assert!(
        err.to_string().contains("spec.controlPlaneEndpoint.port"),
        "{err}"
    );
    // The seed's cluster has a firewallSpec; a template besides it is refused.
    let err = api
        .patch(
            "metal-stack-cluster-v1alpha4",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"firewallTemplateRef": {"name": "edge"}}})),
        )
        .await
        .expect_err("firewallSpec and firewallTemplateRef exclude each other");
    assert!(
        err.to_string().contains(
            "set at most one of firewallSpec, firewallTemplateRef and firewallDeploymentRef"
        ),
        "{err}"
    );
    // A firewall template that names a machine is refused.
    let templates = api_for(&client, &ns.name, "v1alpha4", "MetalStackFirewallTemplate");
    let pinned: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": "pinned"},
        "spec": {"template": {"spec": {"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86",
            "providerID": "metal://mini-lab/00000000-0000-0000-0000-000000000001"}}}
    }))
    .expect("object");
    let err = templates
        .create(&Default::default(), &pinned)
        .await
        .expect_err("a template naming a machine");
    assert!(
        err.to_string().contains("a template cannot name a machine"),
        "{err}"
    );
    remediation_templates_out_of_range_are_refused(&client, &ns.name).await;
}

/// A remediation template with an unknown strategy, an absurd retry count, a timeout under
/// 100 s or an unknown exhaustion policy is refused, naming the field and what it may be.
async fn remediation_templates_out_of_range_are_refused(client: &kube::Client, ns: &str) {
    let templates = api_for(client, ns, "v1alpha4", "MetalStackRemediationTemplate");
    let cases = [
        (
            json!({"type": "Reset"}),
            [
                "spec.template.spec.strategy.type",
                "\"Reboot\", \"Reinstall\"",
            ],
        ),
        (
            json!({"retryLimit": -1}),
            [
                "spec.template.spec.strategy.retryLimit",
                "greater than or equal to 1",
            ],
        ),
        (
            json!({"retryLimit": 1000}),
            [
                "spec.template.spec.strategy.retryLimit",
                "less than or equal to 10",
            ],
        ),
        (
            json!({"timeoutSeconds": 60}),
            [
                "spec.template.spec.strategy.timeoutSeconds",
                "greater than or equal to 100",
            ],
        ),
        (
            json!({"onExhaustion": "Keep"}),
            [
                "spec.template.spec.strategy.onExhaustion",
                "\"Reuse\", \"Retire\"",
            ],
        ),
    ];
    for (strategy, expected) in cases {
        let template: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackRemediationTemplate",
            "metadata": {"name": "remediation"},
            "spec": {"template": {"spec": {"strategy": strategy}}}
        }))
        .expect("object");
        let err = templates.create(&Default::default(), &template).await;
        let err = err.expect_err(&strategy.to_string()).to_string();
        for part in expected {
            assert!(err.contains(part), "{strategy}: {err}");
        }
    }
    let fine: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackRemediationTemplate",
        "metadata": {"name": "remediation"},
        "spec": {"template": {"spec": {"strategy": {"type": "Reinstall", "retryLimit": 3, "timeoutSeconds": 900, "onExhaustion": "Retire"}}}}
    }))
    .expect("object");
    templates
        .create(&Default::default(), &fine)
        .await
        .expect("a template in range");
}

#[tokio::test(flavor = "current_thread")]
async fn cluster_api_core_manager_adopts_the_metal_stack_cluster() {
    let cp = ControlPlane::shared();
    let client = cp.client().await;
    let ns = cp.namespace("capi").await;

    let work = tempfile::tempdir().expect("temp dir");
    let mut manager = spawn_core_manager(&ManagerOn {
        cp,
        namespace: &ns.name,
        work: work.path(),
    });

    // The seed's manifest is v1alpha3; Cluster API reads it as v1alpha4 (the contract label's last
    // version).
    let mut manifest = fixture("metalstackcluster-initial.yaml");
    manifest["metadata"]["namespace"] = json!(ns.name);
    api_for(&client, &ns.name, "v1alpha3", "MetalStackCluster")
        .create(
            &PostParams::default(),
            &serde_json::from_value(manifest).expect("object"),
        )
        .await
        .expect("MetalStackCluster created");

    let msc = api_for(&client, &ns.name, "v1alpha4", "MetalStackCluster");
    let cluster_gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&cluster_gvk, "clusters"),
    );
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "metal-stack-cluster", "namespace": ns.name},
        "spec": {"infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "MetalStackCluster",
            "name": "metal-stack-cluster"
        }}
    }))
    .expect("cluster object");
    let cluster = clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("Cluster created");
    let cluster_uid = cluster.metadata.uid.clone().expect("uid");

    let adopted = eventually(
        "Cluster API to adopt the MetalStackCluster",
        Duration::from_secs(90),
        || {
            let msc = msc.clone();
            let running = manager.is_running();
            async move {
                assert!(running, "the Cluster API manager exited");
                let obj = msc.get("metal-stack-cluster").await.ok()?;
                let owned = obj.metadata.owner_references.as_ref()?.iter().any(|o| {
                    o.kind == "Cluster"
                        && o.name == "metal-stack-cluster"
                        && o.api_version.starts_with("cluster.x-k8s.io/")
                });
                let labelled = obj
                    .metadata
                    .labels
                    .as_ref()?
                    .get("cluster.x-k8s.io/cluster-name")
                    == Some(&"metal-stack-cluster".to_owned());
                (owned && labelled).then_some(obj)
            }
        },
    )
    .await;
    let owner = &adopted.metadata.owner_references.expect("owner references")[0];
    assert_eq!(
        owner.uid, cluster_uid,
        "owned by exactly the Cluster we created"
    );
    assert!(
        manager.is_running(),
        "manager still running; log:\n{}",
        manager.log_tail()
    );
}
