//! The flow behind `make demo`, end to end: the real Cluster API core manager scales a
//! MachineDeployment that clones our MetalStackMachineTemplate; capms provisions everything in
//! the simulator, frees a machine on scale-down and everything on Cluster deletion; machines
//! freed behind capms's back are reported and replaced once their objects are deleted.

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support as support;
use support::activity::{Actions, looked, version_of};

use capms::api::{MetalStackCluster, MetalStackFirewall, MetalStackMachine};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use metal_api::types::{IpFindRequest, Machine, MachineFindRequest, event};
use metal_sim::inventory::Inventory;
use serde_json::{Value, json};

use std::time::Duration;
use support::{
    CapiManager, CapmsManager, ControlPlane, LAB_PROJECT, ManagerOn, Managers, RunningSim,
    TestNamespace, eventually, repo_root,
};

/// The demo's cluster (firewall, MachineDeployment of two workers) in a namespace of its own,
/// with the real Cluster API manager, capms and both their webhooks.
struct Demo {
    capms: CapmsManager,
    capi: CapiManager,
    sim: RunningSim,
    ns: TestNamespace,
    _work: tempfile::TempDir,
}

impl Demo {
    /// Starts everything, capms with `extra` arguments.
    async fn start(prefix: &str, extra: &[&str]) -> Demo {
        Demo::start_on(prefix, extra, false).await
    }

    /// Starts everything, capms with `extra` arguments; with `api_v2`, the cluster reaches the
    /// simulator through metal-apiserver's API v2, with a project token of its own in a
    /// credentials Secret its MetalStackCluster names.
    async fn start_on(prefix: &str, extra: &[&str], api_v2: bool) -> Demo {
        capms::tls::install_default_provider();
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await;
        let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
        let work = tempfile::tempdir().expect("dir");
        // Cluster API's own webhooks default and check its objects, as in a real installation.
        let on = ManagerOn {
            cp,
            namespace: &ns.name,
            work: work.path(),
        };
        let extra: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        let Managers { capi, capms } =
            Managers::start(&on, &sim.url, &extra, "info,capms=debug").await;

        // The demo's cluster, moved into this test's namespace.
        let text =
            std::fs::read_to_string(repo_root().join("tests/fixtures/infrastructure/cluster.yaml"))
                .expect("demo cluster");
        let mut text = text.replace("namespace: demo", &format!("namespace: {}", ns.name));
        if api_v2 {
            let minted = sim.mint_capms_token(LAB_PROJECT, None).await;
            let secret = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "metal-v2", "namespace": ns.name},
                "stringData": sim.v2_credentials(
                    minted["secret"].as_str().expect("a token"), LAB_PROJECT)});
            let reference = "\nspec:\n  credentialsRef:\n    name: metal-v2\n  partition:";
            text = text.replace("\nspec:\n  partition:", reference);
            assert!(
                text.contains(reference),
                "the demo's MetalStackCluster names no partition"
            );
            text = format!("{text}\n---\n{secret}");
        }
        let file = work.path().join("cluster.yaml");
        std::fs::write(&file, text).expect("write");
        cp.apply(&file);
        Demo {
            capms,
            capi,
            sim,
            ns,
            _work: work,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.ns.client.clone(), &self.ns.name)
    }

    fn capi(&self, kind: &str) -> Api<DynamicObject> {
        let gvk = kube::api::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind);
        let plural = format!("{}s", kind.to_lowercase());
        Api::namespaced_with(
            self.ns.client.clone(),
            &self.ns.name,
            &kube::api::ApiResource::from_gvk_with_plural(&gvk, &plural),
        )
    }

    /// capms's and Cluster API's log tails and the objects' conditions.
    fn log(&self) -> String {
        let objects = ControlPlane::shared().kubectl_output(
            &[
                "get",
                "-n",
                &self.ns.name,
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
                ["reason:", "message:", "kind: ", "  name: "]
                    .iter()
                    .any(|k| l.contains(k))
            })
            .collect();
        format!(
            "{}\n--- objects:\n{}\n--- capi:\n{}",
            self.capms.process.log_tail(),
            interesting.join("\n"),
            self.capi.process.log_tail()
        )
    }

    /// Names of the ready MetalStackMachines, once the cluster and its firewall are ready too.
    async fn ready(&self) -> Option<Vec<String>> {
        let cluster = self.api::<MetalStackCluster>().get("demo").await.ok()?;
        let firewall = self
            .api::<MetalStackFirewall>()
            .get("demo-firewall")
            .await
            .ok()?;
        if !(cluster.status?.ready && firewall.status?.ready) {
            return None;
        }
        let list = self
            .api::<MetalStackMachine>()
            .list(&ListParams::default())
            .await
            .ok()?;
        Some(
            list.items
                .into_iter()
                .filter(|m| m.status.as_ref().is_some_and(|s| s.ready))
                .filter_map(|m| m.metadata.name)
                .collect(),
        )
    }

    /// Waits until the cluster, its firewall and `workers` workers are ready.
    async fn wait_ready(&self, workers: usize, what: &str) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(ready) = self.ready().await.filter(|r| r.len() == workers) {
                return ready;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn machines(&self) -> Vec<Machine> {
        self.sim
            .editor()
            .machine_find(&MachineFindRequest::default())
            .await
            .expect("machines")
    }

    async fn allocated(&self) -> usize {
        self.machines()
            .await
            .iter()
            .filter(|m| m.allocation.is_some())
            .count()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn machine_deployment_scales_and_deletion_frees_everything() {
    scales_and_frees(Demo::start("demo", &[]).await, false).await;
}

/// The same through metal-apiserver's API v2: every machine is made through v2 (it carries the
/// labels of a v2 allocation) and freed through it.
#[tokio::test(flavor = "current_thread")]
async fn machine_deployment_scales_and_deletion_frees_everything_through_api_v2() {
    scales_and_frees(Demo::start_on("demo-v2", &[], true).await, true).await;
}

/// The demo's cluster ready (with `api_v2`, each machine made through v2), scaled down by one
/// worker, whose machine is freed, and deleted, with everything it allocated freed.
async fn scales_and_frees(demo: Demo, api_v2: bool) {
    let metal = demo.sim.editor();
    let before_ips = metal.ip_find(&IpFindRequest::default()).await.expect("ips");
    demo.wait_ready(2, "cluster, firewall and two workers ready")
        .await;
    if api_v2 {
        let state = demo.sim.sim.state();
        let allocated = state.machines.values().filter(|m| m.allocation.is_some());
        let labels: Vec<bool> = allocated
            .map(|m| {
                m.allocation_labels
                    .contains_key(metal_api::tags::CLUSTER_ID)
            })
            .collect();
        assert_eq!(
            labels, [true; 3],
            "firewall and two workers made through v2"
        );
    }
    // Cluster API copied providerID and provisioning from our MetalStackMachines.
    let capi_machines = demo.capi("Machine");
    eventually(
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
            done.then_some(())
        },
    )
    .await;
    assert_eq!(demo.allocated().await, 3, "firewall and two workers");

    // Scale down: one worker's machine is freed in the simulator.
    demo.capi("MachineDeployment")
        .patch(
            "demo-worker",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale");
    let msms = demo.api::<MetalStackMachine>();
    eventually(
        "a machine freed after scaling down",
        Duration::from_secs(120),
        || async {
            let left = msms.list(&ListParams::default()).await.ok()?.items.len();
            (demo.allocated().await == 2 && left == 1).then_some(())
        },
    )
    .await;

    // Delete the Cluster: everything capms allocated goes, nothing else.
    let cluster_api = demo.capi("Cluster");
    cluster_api
        .delete("demo", &DeleteParams::foreground())
        .await
        .expect("delete");
    eventually("everything freed", Duration::from_secs(180), || async {
        let list = demo.machines().await;
        let ips = metal.ip_find(&IpFindRequest::default()).await.ok()?;
        let networks = metal.networks().await.ok()?;
        let private = networks.iter().filter(|n| n.parentnetworkid.is_some());
        let waiting = list
            .iter()
            .all(|m| m.allocation.is_none() && m.last_event() == Some(event::WAITING));
        (cluster_api.get_opt("demo").await.ok()?.is_none()
            && waiting
            && private.count() == 0
            && ips == before_ips)
            .then_some(())
    })
    .await;
}

/// The `Ready` condition's reason and message, if the object has one.
fn ready_condition(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> Option<(String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "current_thread")]
async fn machines_freed_behind_capms_back_are_reported_then_replaced_once_deleted() {
    // A short sync period: the loss shows at the next periodic look, which is 5 minutes away by
    // default.
    let demo = Demo::start("lost", &["--sync-period=2s"]).await;
    let workers = demo
        .wait_ready(2, "cluster, firewall and two workers ready")
        .await;
    let msms = demo.api::<MetalStackMachine>();
    let firewalls = demo.api::<MetalStackFirewall>();
    let lost_worker = msms.get(&workers[0]).await.expect("worker");
    let worker_id = lost_worker.spec.provider_id.clone().expect("providerID");
    let firewall = firewalls.get("demo-firewall").await.expect("firewall");
    let firewall_id = firewall.spec.provider_id.clone().expect("providerID");

    // As `metalctl machine rm` would, for a worker and for the firewall.
    demo.freed_outside_capms(&[&worker_id, &firewall_id]).await;
    let reported = eventually(
        "both reported lost, the firewall's loss in the cluster too",
        Duration::from_secs(60),
        || async {
            let worker = msms.get(&workers[0]).await.ok()?;
            let firewall = firewalls.get("demo-firewall").await.ok()?;
            let msc = demo.api::<MetalStackCluster>().get("demo").await.ok()?;
            let worker_status = worker.status?;
            let lost =
                |c: Option<(String, String)>| c.is_some_and(|(reason, _)| reason == "MachineLost");
            let firewall_ready = msc
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "FirewallReady")?;
            // The cluster learns of its firewall's loss from the firewall's status, one watch event
            // after it: wait for that too, not only for the first moment both machines say lost.
            (lost(ready_condition(&worker_status.conditions))
                && lost(ready_condition(&firewall.status?.conditions))
                && firewall_ready.status == "False")
                .then_some((worker_status, firewall_ready))
        },
    )
    .await;
    assert_eq!(reported.0.failure_reason.as_deref(), Some("UpdateError"));
    assert!(
        reported.1.status == "False" && reported.1.message.contains("freed outside capms"),
        "the cluster says its firewall is gone: {:?}",
        reported.1
    );
    // capms looks at both again and again (every 2 s, its sync period) and allocates nothing.
    demo.looks_without_acting(&workers[0], "demo-firewall")
        .await;
    assert_eq!(
        demo.allocated().await,
        1,
        "nothing allocated in their place"
    );

    // What the conditions say to do: delete the Machine (its MachineDeployment replaces it) and
    // the firewall (its MetalStackCluster creates a new one).
    let owner = lost_worker.metadata.owner_references.unwrap_or_default();
    let machine = owner
        .iter()
        .find(|o| o.kind == "Machine")
        .expect("owner Machine");
    demo.capi("Machine")
        .delete(&machine.name, &DeleteParams::default())
        .await
        .expect("delete the Machine");
    firewalls
        .delete("demo-firewall", &DeleteParams::default())
        .await
        .expect("delete the firewall");
    // A MachineSet's replacement, a new firewall, each allocated and booted: two chains that a
    // loaded machine slows down.
    let replaced = support::within(2 * support::LOADED_MACHINE_WAIT, || async {
        let ready = demo.ready().await;
        let fresh = firewalls.get("demo-firewall").await.ok();
        let new_firewall = fresh.as_ref().is_some_and(|f| f.uid() != firewall.uid());
        match ready {
            Some(ready) if ready.len() == 2 && !ready.contains(&workers[0]) && new_firewall => {
                Ok(ready)
            }
            ready => Err(format!("ready: {ready:?}; a new firewall: {new_firewall}")),
        }
    })
    .await
    .unwrap_or_else(|seen| panic!("replacements not ready: {seen}\n{}", demo.log()));
    assert!(replaced.contains(&workers[1]), "the other worker untouched");
    assert_eq!(demo.allocated().await, 3, "firewall and two workers again");
}

impl Demo {
    /// Frees the machines of `provider_ids` in metal-api, as `metalctl machine rm` would.
    async fn freed_outside_capms(&self, provider_ids: &[&str]) {
        for provider_id in provider_ids {
            let id = provider_id.rsplit('/').next().expect("machine id");
            let freed = self.sim.editor().machine_free(id).await;
            freed.expect("freed outside capms");
        }
    }

    /// capms reconciles MetalStackMachine `worker` and MetalStackFirewall `firewall` three times
    /// each from their current versions on, and takes no action meanwhile.
    async fn looks_without_acting(&self, worker: &str, firewall: &str) {
        let actions = Actions::now(self.capms.metrics_port, &self.sim.sim).await;
        let log = || self.capms.process.log_text();
        let ns = &self.ns.name;
        let msm = self
            .api::<MetalStackMachine>()
            .get(worker)
            .await
            .expect("worker");
        looked(
            log,
            &format!("MetalStackMachine {ns}/{worker}"),
            version_of(&msm),
            3,
        )
        .await;
        let fw = self
            .api::<MetalStackFirewall>()
            .get(firewall)
            .await
            .expect("firewall");
        looked(
            log,
            &format!("MetalStackFirewall {ns}/{firewall}"),
            version_of(&fw),
            3,
        )
        .await;
        assert_eq!(
            Actions::now(self.capms.metrics_port, &self.sim.sim).await,
            actions,
            "capms acted after its machines were lost"
        );
    }
}
