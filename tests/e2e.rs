//! The flow behind `make demo`, end to end: the real Cluster API core manager scales a
//! MachineDeployment that clones our MetalStackMachineTemplate; capms provisions everything in
//! the simulator, frees a machine on scale-down and everything on Cluster deletion.

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

mod support;

use capms::api::{MetalStackCluster, MetalStackFirewall, MetalStackMachine};
use capms::metal::types::{IpFindRequest, MachineFindRequest, event};
use capms::sim::inventory::Inventory;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use std::time::Duration;
use support::{
    CapiManager, CapmsManager, ControlPlane, ManagerOn, RunningSim, eventually, repo_root,
};

fn dynamic(
    client: &kube::Client,
    ns: &str,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &kube::api::ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn machine_deployment_scales_and_deletion_frees_everything() {
    capms::tls::install_default_provider();
    let cp = ControlPlane::shared();
    let ns = cp.namespace("demo").await;
    let client = ns.client.clone();
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let work = tempfile::tempdir().expect("dir");
    let metal = sim.editor();
    let before_ips = metal.ip_find(&IpFindRequest::default()).await.expect("ips");

    // Cluster API's own webhooks default and check its objects, as in a real installation.
    let on = ManagerOn {
        cp,
        namespace: &ns.name,
        work: work.path(),
    };
    let capi = CapiManager::start(&on).await;
    let certs = work.path().join("certs");
    cp.issue_serving_cert(&certs);
    let capms = CapmsManager::start("capms", &ns.name, &sim.url, &certs, work.path(), &[]);
    capms.wait_ready().await;
    // Our webhooks in the path, as in a real install (scoped to this namespace).
    cp.register_capms_webhooks(capms.webhook_port, &ns.name, work.path());

    // The demo's cluster, moved into this test's namespace.
    let text = std::fs::read_to_string(repo_root().join("manifests/demo/cluster.yaml"))
        .expect("demo cluster");
    let file = work.path().join("cluster.yaml");
    std::fs::write(
        &file,
        text.replace("namespace: demo", &format!("namespace: {}", ns.name)),
    )
    .expect("write");
    cp.apply(&file);

    let clusters: Api<MetalStackCluster> = Api::namespaced(client.clone(), &ns.name);
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(client.clone(), &ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(client.clone(), &ns.name);
    let capi_machines = dynamic(
        &client,
        &ns.name,
        "cluster.x-k8s.io",
        "v1beta2",
        "Machine",
        "machines",
    );
    let ready_workers = || async {
        let list = machines.list(&ListParams::default()).await.ok()?;
        Some(
            list.items
                .iter()
                .filter(|m| m.status.as_ref().is_some_and(|s| s.ready))
                .count(),
        )
    };
    let log = || {
        let objects = cp.kubectl_output(
            &[
                "get",
                "-n",
                &ns.name,
                "cluster,machines,metalstackclusters,metalstackmachines,metalstackfirewalls",
                "-o",
                "yaml",
            ],
            &[],
        );
        let text = String::from_utf8_lossy(&objects.stdout).into_owned();
        let interesting: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.contains("reason:")
                    || l.contains("message:")
                    || l.contains("kind: ")
                    || l.contains("  name: ")
            })
            .collect();
        format!(
            "{}\n--- objects:\n{}\n--- capi:\n{}",
            capms.process.log_tail(),
            interesting.join("\n"),
            capi.process.log_tail()
        )
    };
    let wait = |what: &'static str, secs: u64| (what, Duration::from_secs(secs));

    let (what, limit) = wait("cluster, firewall and two workers ready", 180);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let cluster_ready = clusters
            .get("demo")
            .await
            .ok()
            .and_then(|c| c.status)
            .is_some_and(|s| s.ready);
        let firewall_ready = firewalls
            .get("demo-firewall")
            .await
            .ok()
            .and_then(|f| f.status)
            .is_some_and(|s| s.ready);
        if cluster_ready && firewall_ready && ready_workers().await == Some(2) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; capms log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Cluster API copied providerID and provisioning from our MetalStackMachines.
    let provisioned = eventually(
        "every Machine with providerID and provisioned infrastructure",
        Duration::from_secs(60),
        || async {
            let list = capi_machines.list(&ListParams::default()).await.ok()?;
            let done = list.items.len() == 2
                && list.items.iter().all(|m| {
                    m.data["spec"]["providerID"]
                        .as_str()
                        .is_some_and(|p| p.starts_with("metal://mini-lab/"))
                        && m.data["status"]["initialization"]["infrastructureProvisioned"]
                            == Value::Bool(true)
                });
            done.then_some(list.items)
        },
    )
    .await;
    assert_eq!(provisioned.len(), 2);
    let allocated = |list: &[capms::metal::types::Machine]| {
        list.iter().filter(|m| m.allocation.is_some()).count()
    };
    assert_eq!(
        allocated(
            &metal
                .machine_find(&MachineFindRequest::default())
                .await
                .expect("machines")
        ),
        3,
        "firewall and two workers"
    );

    // Scale down: one worker's machine is freed in the simulator.
    let deployments = dynamic(
        &client,
        &ns.name,
        "cluster.x-k8s.io",
        "v1beta2",
        "MachineDeployment",
        "machinedeployments",
    );
    deployments
        .patch(
            "demo-worker",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale");
    eventually(
        "a machine freed after scaling down",
        Duration::from_secs(120),
        || async {
            let list = metal
                .machine_find(&MachineFindRequest::default())
                .await
                .ok()?;
            (allocated(&list) == 2
                && machines
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .len()
                    == 1)
                .then_some(())
        },
    )
    .await;

    // Delete the Cluster: everything capms allocated goes, nothing else.
    let cluster_api = dynamic(
        &client,
        &ns.name,
        "cluster.x-k8s.io",
        "v1beta2",
        "Cluster",
        "clusters",
    );
    cluster_api
        .delete("demo", &DeleteParams::foreground())
        .await
        .expect("delete");
    eventually("everything freed", Duration::from_secs(180), || async {
        let list = metal
            .machine_find(&MachineFindRequest::default())
            .await
            .ok()?;
        let ips = metal.ip_find(&IpFindRequest::default()).await.ok()?;
        let networks = metal
            .networks()
            .await
            .ok()?
            .into_iter()
            .filter(|n| n.parentnetworkid.is_some())
            .count();
        let waiting = list
            .iter()
            .all(|m| m.allocation.is_none() && m.last_event() == Some(event::WAITING));
        (cluster_api.get_opt("demo").await.ok()?.is_none()
            && waiting
            && networks == 0
            && ips == before_ips)
            .then_some(())
    })
    .await;
}
