//! `clusterctl move` for real: two management clusters (each a real kube-apiserver with Cluster
//! API core, capms and both their webhooks), one metal-api simulator, and a workload cluster's
//! API where the simulator's node agent keeps a Node for every machine that phoned home (so
//! Machines get their nodeRef and clusterctl's preflight passes on its own). A provisioned
//! cluster moves from source to target in the middle of a firewall rollout with zero metal-api
//! allocations and frees; the source frees nothing; the target resumes the rollout; deleting the
//! Cluster on the target then frees everything. The cluster's metal-api credentials are a Secret
//! of its own (the managers' own credentials reach another simulator), moved with it by
//! clusterctl's move label: an HMAC key of metal-api, or a project token of metal-apiserver
//! (API v2), one test each.

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support as support;

use capms::api::remediation::MetalStackRemediationTemplate;
use capms::api::{MetalStackCluster, MetalStackFirewall, MetalStackMachine};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::api::{Patch, PatchParams};
use metal_api::types::{IpFindRequest, MachineFindRequest};
use metal_sim::inventory::Inventory;
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use support::{
    CapiManager, CapmsManager, ControlPlane, ManagerOn, Managers, RunningSim, eventually,
};

const CLUSTER: &str = "moved";
/// The project of the fixture's cluster, in the lab inventory.
use support::LAB_PROJECT;

/// The tests of this file run one at a time: each brings up a second management cluster's
/// managers, more than two cores carry beside another.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Cluster API core and capms on one management cluster, watching the test's namespace.
struct Management<'a> {
    name: &'static str,
    cp: &'a ControlPlane,
    capi: CapiManager,
    capms: CapmsManager,
    _work: tempfile::TempDir,
}

impl<'a> Management<'a> {
    async fn start(
        name: &'static str,
        cp: &'a ControlPlane,
        ns: &str,
        sim: &RunningSim,
    ) -> Management<'a> {
        let work = tempfile::Builder::new()
            .prefix(&format!("capms-move-{name}-"))
            .tempdir()
            .expect("temp dir");
        let on = ManagerOn {
            cp,
            namespace: ns,
            work: work.path(),
        };
        let Managers { capi, capms } =
            Managers::start(&on, &sim.url, &[], "info,capms=debug").await;
        cp.record_clusterctl_inventory();
        Management {
            name,
            cp,
            capi,
            capms,
            _work: work,
        }
    }

    /// The logs and the capms objects to read when something does not happen.
    fn logs(&self, ns: &str) -> String {
        let objects = self.cp.kubectl_output(
            &[
                "get",
                "-n",
                ns,
                "metalstackclusters,metalstackfirewalls,metalstackmachines",
                "-o",
                "yaml",
            ],
            &[],
        );
        format!(
            "--- {} capms:\n{}\n--- {} cluster-api:\n{}\n--- {} objects:\n{}",
            self.name,
            self.capms.process.log_tail(),
            self.name,
            self.capi.process.log_tail(),
            self.name,
            String::from_utf8_lossy(&objects.stdout)
        )
    }
}

fn capi_api(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

/// Everything ready and every Machine with its Node: what clusterctl's preflight wants, and what
/// the target must show again after the move.
async fn provisioned(client: &kube::Client, ns: &str) -> Option<()> {
    let cluster = capi_api(client, ns, "Cluster")
        .get_opt(CLUSTER)
        .await
        .ok()??;
    let initialized = cluster.data["status"]["conditions"]
        .as_array()?
        .iter()
        .any(|c| c["type"] == "ControlPlaneInitialized" && c["status"] == "True");
    let machines = capi_api(client, ns, "Machine")
        .list(&ListParams::default())
        .await
        .ok()?;
    let with_nodes = machines.items.len() == 3
        && machines
            .items
            .iter()
            .all(|m| m.data["status"]["nodeRef"]["name"].is_string());
    let msc: Api<MetalStackCluster> = Api::namespaced(client.clone(), ns);
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(client.clone(), ns);
    let msms: Api<MetalStackMachine> = Api::namespaced(client.clone(), ns);
    let cluster_ready = msc.get(CLUSTER).await.ok()?.status.is_some_and(|s| s.ready);
    let firewall_ready = firewalls
        .get(&format!("{CLUSTER}-firewall"))
        .await
        .ok()?
        .status
        .is_some_and(|s| s.ready);
    let list = msms.list(&ListParams::default()).await.ok()?;
    let machines_ready = list.items.len() == 3
        && list
            .items
            .iter()
            .all(|m| m.status.as_ref().is_some_and(|s| s.ready));
    (initialized && with_nodes && cluster_ready && firewall_ready && machines_ready).then_some(())
}

async fn wait_provisioned(side: &Management<'_>, ns: &str, what: &str) {
    let client = side.cp.client().await;
    let done = tokio::time::timeout(
        Duration::from_secs(240),
        eventually(what, Duration::from_secs(240), || provisioned(&client, ns)),
    )
    .await;
    assert!(
        done.is_ok(),
        "timed out waiting for {what}\n{}",
        side.logs(ns)
    );
}

/// metal-api calls that allocate or free anything (machines, firewalls, networks, IPs), through
/// either API, as the simulator counted them.
fn allocations_and_frees(sim: &RunningSim) -> Vec<String> {
    let report = sim.sim.stats().report();
    let writes = ["allocate", "free", "Service/Create", "Service/Delete"];
    report
        .requests
        .iter()
        .filter(|r| writes.iter().any(|w| r.route.contains(w)))
        .map(|r| format!("{} {} {} ×{}", r.method, r.route, r.status, r.count))
        .collect()
}

/// Allocated machines, IPs and private networks in the simulator.
async fn metal_state(sim: &RunningSim) -> (Vec<String>, Vec<String>, Vec<String>) {
    let metal = sim.editor();
    let mut machines: Vec<String> = metal
        .machine_find(&MachineFindRequest::default())
        .await
        .expect("machines")
        .into_iter()
        .filter(|m| m.allocation.is_some())
        .map(|m| m.id)
        .collect();
    machines.sort();
    let mut ips: Vec<String> = metal
        .ip_find(&IpFindRequest::default())
        .await
        .expect("ips")
        .into_iter()
        .map(|ip| ip.ipaddress)
        .collect();
    ips.sort();
    let mut networks: Vec<String> = metal
        .networks()
        .await
        .expect("networks")
        .into_iter()
        .filter(|n| n.parentnetworkid.is_some())
        .map(|n| n.id)
        .collect();
    networks.sort();
    (machines, ips, networks)
}

/// The workload cluster's kubeconfig where Cluster API looks for it (`<cluster>-kubeconfig`);
/// a control-plane provider would write it, none runs here.
async fn store_workload_kubeconfig(client: &kube::Client, ns: &str, workload: &ControlPlane) {
    let kubeconfig = std::fs::read_to_string(&workload.kubeconfig).expect("workload kubeconfig");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"),
                     "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": kubeconfig},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            &format!("{CLUSTER}-kubeconfig"),
            &PatchParams::apply("capms-test").force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("kubeconfig secret");
}

/// Which API the moved cluster's credentials reach metal-stack through.
#[derive(Clone, Copy, Debug)]
enum Through {
    /// metal-api, with an HMAC key.
    V1,
    /// metal-apiserver, with a project token.
    V2,
}

/// The cluster's metal-api credentials (the fixture names them), labelled for clusterctl move.
async fn store_credentials(client: &kube::Client, ns: &str, sim: &RunningSim, api: Through) {
    let data = match api {
        Through::V1 => json!({"url": sim.url, "hmac": "metal-edit", "hmacAuthType": "Metal-Edit"}),
        Through::V2 => {
            let minted = sim.mint_capms_token(LAB_PROJECT, None).await;
            sim.v2_credentials(minted["secret"].as_str().expect("a token"), LAB_PROJECT)
        }
    };
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "moved-metal", "labels": {"clusterctl.cluster.x-k8s.io/move": ""}},
        "stringData": data
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&Default::default(), &secret)
        .await
        .expect("create the credentials Secret");
}

async fn count_capms_objects(client: &kube::Client, ns: &str) -> usize {
    let lp = ListParams::default();
    let msc: Api<MetalStackCluster> = Api::namespaced(client.clone(), ns);
    let fw: Api<MetalStackFirewall> = Api::namespaced(client.clone(), ns);
    let msm: Api<MetalStackMachine> = Api::namespaced(client.clone(), ns);
    let msrt: Api<MetalStackRemediationTemplate> = Api::namespaced(client.clone(), ns);
    msc.list(&lp).await.map_or(0, |l| l.items.len())
        + fw.list(&lp).await.map_or(0, |l| l.items.len())
        + msm.list(&lp).await.map_or(0, |l| l.items.len())
        + msrt.list(&lp).await.map_or(0, |l| l.items.len())
}

/// Every free machine stops before it phones home (`hold`), or none does.
fn hold_phone_home(sim: &RunningSim, hold: bool) {
    let mut state = sim.sim.state();
    let free: Vec<String> = state
        .machines
        .values()
        .filter(|m| hold && m.allocation.is_none())
        .map(|m| m.id.clone())
        .collect();
    state.faults.never_phone_home = free.into_iter().collect();
}

/// Changes the cluster's firewall rules on `cp` and waits until a firewall rolls in for them;
/// returns its name.
async fn roll_firewall(cp: &ControlPlane, ns: &str) -> String {
    let clusters: Api<MetalStackCluster> = Api::namespaced(cp.client().await, ns);
    let rules = json!({"spec": {"firewallSpec": {"rules": {"egress": [
        {"protocol": "tcp", "ports": [443], "to": ["0.0.0.0/0"], "comment": "allow https"},
        {"protocol": "tcp", "ports": [8443], "to": ["0.0.0.0/0"], "comment": "one more"}]}}}});
    clusters
        .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&rules))
        .await
        .expect("change the firewall rules");
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(cp.client().await, ns);
    eventually(
        "a firewall allocated for the new rules",
        Duration::from_secs(180),
        || async {
            let c = clusters.get(CLUSTER).await.ok()?;
            let rolling = c.status?.firewall?.rolling_in?;
            let fw = firewalls.get(&rolling).await.ok()?;
            fw.status?.machine_id.map(|_| rolling)
        },
    )
    .await
}

/// Waits until `rolling` serves alone on `cp`.
async fn rolled_out(cp: &ControlPlane, ns: &str, rolling: &str) {
    let clusters: Api<MetalStackCluster> = Api::namespaced(cp.client().await, ns);
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(cp.client().await, ns);
    eventually(
        "the firewall rolled in serving alone",
        Duration::from_secs(180),
        || async {
            let status = clusters.get(CLUSTER).await.ok()?.status?;
            let serving = status.firewall?.serving?;
            let left = firewalls.list(&ListParams::default()).await.ok()?.items;
            (status.ready && serving == rolling && left.len() == 1).then_some(())
        },
    )
    .await;
}

fn fixture() -> &'static Path {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| support::repo_root().join("tests/fixtures/move/cluster.yaml"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_move_mid_rollout_keeps_every_allocation_and_the_target_resumes_it_then_frees_all()
 {
    move_mid_rollout(Through::V1).await;
}

/// The same with the cluster's credentials a metal-apiserver project token: the token moves in
/// its Secret, and the target adopts and frees through v2 what the source made through v2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_move_of_a_cluster_on_api_v2_keeps_every_allocation_and_frees_all_through_v2() {
    move_mid_rollout(Through::V2).await;
}

async fn move_mid_rollout(api: Through) {
    let _turn = ONE_AT_A_TIME.lock().await;
    capms::tls::install_default_provider();
    let source_cp = ControlPlane::shared();
    let target_cp = ControlPlane::management("target");
    let workload = ControlPlane::bare("workload");
    let ns = source_cp.namespace("move").await;
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    // What the managers reach with their own credentials: the cluster must never be made here.
    let managers_own = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let (initial, own_initial) = (metal_state(&sim).await, metal_state(&managers_own).await);
    let source = Management::start("source", source_cp, &ns.name, &managers_own).await;
    let target = Management::start("target", &target_cp, &ns.name, &managers_own).await;
    let nodes = metal_sim::workload::nodes::spawn(
        sim.sim.clone(),
        vec![capms::ownership::cluster_tag(&ns.name, CLUSTER)],
        workload.client().await,
        Duration::from_millis(500),
    );

    store_workload_kubeconfig(&ns.client, &ns.name, &workload).await;
    store_credentials(&ns.client, &ns.name, &sim, api).await;
    source_cp.kubectl(
        &["apply", "--server-side", "-n", &ns.name, "-f"],
        &[fixture().to_path_buf()],
    );
    wait_provisioned(&source, &ns.name, "the cluster provisioned on the source").await;
    assert_eq!(
        metal_state(&sim).await.0.len(),
        4,
        "firewall, control plane, two workers"
    );
    // The cluster moves while a new firewall rolls in, held before it phones home.
    hold_phone_home(&sim, true);
    let rolling = roll_firewall(source_cp, &ns.name).await;
    let before = metal_state(&sim).await;
    assert_eq!(before.0.len(), 5, "and the firewall rolling in: {before:?}");
    let writes_before = allocations_and_frees(&sim);
    let through_v2 = |w: &String| w.contains("/metalstack.api.v2.");
    if let Through::V2 = api {
        assert!(
            !writes_before.is_empty() && writes_before.iter().all(through_v2),
            "made through v2 only: {writes_before:?}"
        );
    }

    let to = target_cp.kubeconfig.to_string_lossy().into_owned();
    let moved = source_cp
        .clusterctl(&["move", "--namespace", &ns.name, "--to-kubeconfig", &to])
        .await;
    assert!(
        moved.status.success(),
        "clusterctl move: {}\n{}\n{}",
        String::from_utf8_lossy(&moved.stderr),
        source.logs(&ns.name),
        target.logs(&ns.name)
    );
    wait_provisioned(&target, &ns.name, "the moved cluster ready on the target").await;
    assert_eq!(
        count_capms_objects(&ns.client, &ns.name).await,
        0,
        "nothing left on the source"
    );
    let templates: Api<MetalStackRemediationTemplate> =
        Api::namespaced(target_cp.client().await, &ns.name);
    assert!(
        templates
            .get_opt("moved-worker")
            .await
            .ok()
            .flatten()
            .is_some(),
        "the remediation template moved"
    );
    assert_eq!(
        metal_state(&sim).await,
        before,
        "the same machines, IPs and network"
    );
    assert_eq!(
        allocations_and_frees(&sim),
        writes_before,
        "zero metal-api allocations and frees across the move"
    );
    // The target resumes the rollout: the firewall rolling in serves, the old one is freed.
    hold_phone_home(&sim, false);
    rolled_out(&target_cp, &ns.name, &rolling).await;
    assert_eq!(metal_state(&sim).await.0.len(), 4, "the old firewall freed");

    capi_api(&target_cp.client().await, &ns.name, "Cluster")
        .delete(CLUSTER, &DeleteParams::foreground())
        .await
        .expect("delete the Cluster on the target");
    let freed = tokio::time::timeout(
        Duration::from_secs(180),
        eventually(
            "everything freed from the target",
            Duration::from_secs(180),
            || async { (metal_state(&sim).await == initial).then_some(()) },
        ),
    )
    .await;
    assert!(
        freed.is_ok(),
        "not everything freed\n{}",
        target.logs(&ns.name)
    );
    assert_eq!(
        metal_state(&managers_own).await,
        own_initial,
        "nothing made with the managers' own credentials"
    );
    nodes.abort();
}
