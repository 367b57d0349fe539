//! The reconcile loops end to end: the real kube-apiserver and Cluster API core manager, the
//! `capms manager` binary, and the metal-api simulator with seed 000's inventory.

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

mod support;

use capms::api::{MetalStackCluster, MetalStackFirewall, MetalStackMachine};
use capms::metal::types::*;
use capms::sim::inventory::Inventory;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use support::{
    ChildProcess, ControlPlane, RunningSim, TestNamespace, binaries, eventually, free_port,
    repo_root,
};

const MSC: &str = "metal-stack-cluster";
const MSM: &str = "metal-stack-machine";
const FIREWALL_MACHINE: &str = "2294c949-88f6-5390-8154-fa53d93a3313";
const WORKER_MACHINE: &str = "e0ab02d2-27cd-5a5e-8efc-080ba80cf258";

/// Everything one test needs, torn down on drop (processes killed, namespace deleted).
struct Env {
    /// Who capms runs as; the admin kubeconfig when None.
    kubeconfig: Option<std::path::PathBuf>,
    ns: TestNamespace,
    sim: RunningSim,
    _capi: ChildProcess,
    capms: Option<ChildProcess>,
    work: tempfile::TempDir,
}

impl Env {
    async fn start(prefix: &str) -> Env {
        let mut env = Self::without_capms(prefix).await;
        env.start_capms(&[]);
        env
    }

    async fn without_capms(prefix: &str) -> Env {
        Self::with_inventory(prefix, Inventory::seed000()).await
    }

    async fn with_inventory(prefix: &str, inventory: Inventory) -> Env {
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await;
        let sim = RunningSim::start(inventory, "/metal").await;
        let work = tempfile::tempdir().expect("temp dir");
        let cert_dir = work.path().join("capi-certs");
        cp.issue_serving_cert(&cert_dir);
        let capi = ChildProcess::spawn(
            "cluster-api-manager",
            &binaries().capi.join("cluster-api-manager"),
            &[
                format!("--kubeconfig={}", cp.kubeconfig.display()),
                format!("--webhook-port={}", free_port()),
                format!("--webhook-cert-dir={}", cert_dir.display()),
                format!("--health-addr=127.0.0.1:{}", free_port()),
                format!("--diagnostics-address=127.0.0.1:{}", free_port()),
                "--insecure-diagnostics".into(),
                "--leader-elect=false".into(),
                format!("--namespace={}", ns.name),
            ],
            &[],
            work.path(),
        );
        Env {
            kubeconfig: None,
            ns,
            sim,
            _capi: capi,
            capms: None,
            work,
        }
    }

    fn capms_args(&self, extra: &[&str], metrics_port: u16) -> Vec<String> {
        let cp = ControlPlane::shared();
        let kubeconfig = self
            .kubeconfig
            .clone()
            .unwrap_or_else(|| cp.kubeconfig.clone());
        let mut args = vec![
            "manager".to_owned(),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--namespace={}", self.ns.name),
            format!("--health-addr=127.0.0.1:{}", free_port()),
            format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            // These tests count reconciles on /metrics over plain HTTP.
            "--metrics-secure=false".into(),
            format!("--leader-election-namespace={}", self.ns.name),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    }

    fn spawn_capms(&self, name: &str, extra: &[&str], metrics_port: u16) -> ChildProcess {
        ChildProcess::spawn(
            name,
            std::path::Path::new(env!("CARGO_BIN_EXE_capms")),
            &self.capms_args(extra, metrics_port),
            &[
                ("METAL_API_URL", self.sim.url.as_str()),
                ("METAL_API_HMAC", "metal-edit"),
                ("METAL_API_HMAC_AUTH_TYPE", "Metal-Edit"),
                ("RUST_LOG", "info,capms=debug"),
            ],
            self.work.path(),
        )
    }

    fn start_capms(&mut self, extra: &[&str]) {
        self.capms = Some(self.spawn_capms("capms", extra, free_port()));
    }

    fn capms_log(&self) -> String {
        self.capms
            .as_ref()
            .map(|c| c.log_tail())
            .unwrap_or_default()
    }

    fn client(&self) -> kube::Client {
        self.ns.client.clone()
    }

    fn dynamic(&self, api_version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        Api::namespaced_with(
            self.client(),
            &self.ns.name,
            &kube::api::ApiResource::from_gvk_with_plural(&gvk, plural),
        )
    }

    /// Server-side applies a manifest as given, only moved into the test's namespace.
    async fn apply(&self, mut manifest: Value) {
        manifest["metadata"]["namespace"] = json!(self.ns.name);
        let api_version = manifest["apiVersion"]
            .as_str()
            .expect("apiVersion")
            .to_owned();
        let kind = manifest["kind"].as_str().expect("kind").to_owned();
        let name = manifest["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        let plural = format!("{}s", kind.to_lowercase());
        self.dynamic(&api_version, &kind, &plural)
            .patch(
                &name,
                &PatchParams::apply("capms-test").force(),
                &Patch::Apply(&manifest),
            )
            .await
            .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
    }

    async fn apply_seed_cluster(&self, cluster_name: &str, msc: Value) {
        self.apply(msc.clone()).await;
        self.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": cluster_name},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": msc["metadata"]["name"]}}
        }))
        .await;
    }

    async fn apply_seed_machine(&self, cluster_name: &str) {
        self.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "test1-controlplane-0-user-data"},
            "stringData": {"value": "#cloud-config\nhostname: node-1\n", "format": "cloud-config"}}))
        .await;
        self.apply(fixture("metalstackmachine-initial.yaml")).await;
        self.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": cluster_name, "labels": {"cluster.x-k8s.io/control-plane": ""}},
            "spec": {
                "clusterName": cluster_name,
                "bootstrap": {"dataSecretName": "test1-controlplane-0-user-data"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": MSM}
            }
        }))
        .await;
    }

    async fn metal_state(&self) -> (Vec<Network>, Vec<Ip>, Vec<Machine>) {
        let client = self.sim.editor();
        let networks = client
            .networks()
            .await
            .expect("networks")
            .into_iter()
            .filter(|n| n.parentnetworkid.is_some())
            .collect();
        let ips = client
            .ip_find(&IpFindRequest::default())
            .await
            .expect("ips");
        let machines = client
            .machine_find(&MachineFindRequest::default())
            .await
            .expect("machines");
        (networks, ips, machines)
    }
}

/// A cluster in the default (mini-lab on loopback) inventory that lets capms allocate every
/// resource itself: no endpoint host, no preset machines.
fn lab_cluster() -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackCluster",
        "metadata": {"name": MSC},
        "spec": {
            "partition": "mini-lab", "projectID": "00000000-0000-0000-0000-000000000001", "publicNetworkID": "internet-mini-lab",
            "firewallSpec": {"image": "firewall-ubuntu-3.0", "machineType": "v1-small-x86",
                "rules": {"egress": [{"protocol": "tcp", "ports": [443], "to": ["0.0.0.0/0"], "comment": "allow https"}]}}
        }
    })
}

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/seed000").join(name))
        .expect("fixture");
    serde_saphyr::from_str(&text).expect("YAML")
}

async fn wait_ready<K>(env: &Env, api: &Api<K>, name: &str, ready: impl Fn(&K) -> bool) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{} {name} to become ready", std::any::type_name::<K>());
    let log = env.capms_log();
    let found = tokio::time::timeout(
        Duration::from_secs(90),
        eventually(&what, Duration::from_secs(90), || async {
            api.get(name).await.ok().filter(|o| ready(o))
        }),
    )
    .await;
    match found {
        Ok(o) => o,
        Err(_) => panic!("timed out waiting for {what}; capms log:\n{log}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn seed_000_reaches_its_reconciled_state_and_deletion_frees_everything() {
    let env = Env::start("seed").await;
    let before = env.metal_state().await;
    env.apply_seed_cluster(MSC, fixture("metalstackcluster-initial.yaml"))
        .await;
    env.apply_seed_machine(MSC).await;

    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);

    let msc = wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let status = msc.status.clone().expect("status");
    assert_eq!(
        status.initialization.and_then(|i| i.provisioned),
        Some(true),
        "ready and provisioned together"
    );
    let owner = &msc
        .metadata
        .owner_references
        .clone()
        .expect("owner references")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Cluster", MSC),
        "owned by the Cluster, as the seed shows"
    );
    assert_eq!(
        msc.spec
            .control_plane_endpoint
            .clone()
            .and_then(|e| e.host)
            .as_deref(),
        Some("100.255.254.1")
    );
    assert_eq!(
        status.allocated_control_plane_ip.as_deref(),
        Some("100.255.254.1"),
        "the given host is reserved as a static IP"
    );
    for condition in [
        "Ready",
        "NetworkReady",
        "ControlPlaneIPReady",
        "FirewallReady",
    ] {
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == condition && c.status == "True"),
            "{condition} in {:?}",
            status.conditions
        );
    }
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Paused" && c.status == "False")
    );

    let fw = firewalls
        .get(&format!("{MSC}-firewall"))
        .await
        .expect("firewall created from firewallSpec");
    assert!(fw.status.as_ref().is_some_and(|s| s.ready));
    assert_eq!(
        fw.status.as_ref().and_then(|s| s.machine_id.as_deref()),
        Some(FIREWALL_MACHINE),
        "the seed's preset firewall machine"
    );

    let msm = wait_ready(&env, &machines, MSM, |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert_eq!(
        msm.spec.provider_id.as_deref(),
        Some("metalstack://e0ab02d2-27cd-5a5e-8efc-080ba80cf258"),
        "a providerID the user wrote is kept"
    );
    let owner = &msm
        .metadata
        .owner_references
        .clone()
        .expect("owner references")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Machine", MSC),
        "owned by the Machine, as the seed shows"
    );
    let mstatus = msm.status.clone().expect("status");
    assert_eq!(
        mstatus.initialization.and_then(|i| i.provisioned),
        Some(true)
    );
    let kinds: Vec<_> = mstatus
        .addresses
        .iter()
        .map(|a| serde_json::to_value(a.type_).expect("type"))
        .collect();
    assert_eq!(
        kinds,
        [json!("InternalIP"), json!("Hostname"), json!("InternalDNS")],
        "the seed's address kinds"
    );
    assert!(
        mstatus.addresses[0].address.starts_with("172.22."),
        "InternalIP from the cluster's private network"
    );
    assert_eq!(
        (
            mstatus.addresses[1].address.as_str(),
            mstatus.addresses[2].address.as_str()
        ),
        ("node-1", "node-1"),
        "the hostname the bootstrap cloud-config sets, as the seed shows"
    );
    assert!(
        msm.metadata
            .labels
            .clone()
            .unwrap_or_default()
            .contains_key("machine.metal-stack.io/rack")
    );

    // The simulator holds exactly one network, one control-plane IP, one firewall and one machine.
    let (networks, ips, metal_machines) = env.metal_state().await;
    assert_eq!(networks.len(), 1, "{networks:?}");
    let allocated: Vec<_> = metal_machines
        .iter()
        .filter(|m| m.allocation.is_some())
        .collect();
    assert_eq!(allocated.len(), 2, "one firewall and one machine");
    let worker = allocated
        .iter()
        .find(|m| m.id == WORKER_MACHINE)
        .expect("the seed's machine");
    let wa = worker.allocation.as_ref().expect("allocation");
    assert_eq!(
        wa.user_data, "#cloud-config\nhostname: node-1\n",
        "bootstrap data passed as user data"
    );
    assert_eq!(
        wa.image.as_ref().map(|i| i.id.as_str()),
        Some("ubuntu-cloud-init-20.04.20201126")
    );
    assert_eq!(wa.role, "machine");
    let firewall = allocated
        .iter()
        .find(|m| m.id == FIREWALL_MACHINE)
        .expect("the seed's firewall machine");
    assert_eq!(
        firewall.allocation.as_ref().map(|a| a.role.as_str()),
        Some("firewall")
    );
    let cp_ips: Vec<_> = ips
        .iter()
        .filter(|ip| ip.networkid == "internet-vagrant-lab" && ip.type_ == "static")
        .collect();
    assert_eq!(cp_ips.len(), 1, "{ips:?}");

    // Delete the Cluster: Cluster API deletes the Machine, capms frees everything it allocated.
    let cluster_api = env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
    cluster_api
        .delete(MSC, &DeleteParams::foreground())
        .await
        .expect("delete cluster");
    eventually(
        "the Cluster and its infrastructure to be gone",
        Duration::from_secs(120),
        || async {
            let gone = cluster_api.get_opt(MSC).await.ok()?.is_none()
                && clusters.get_opt(MSC).await.ok()?.is_none()
                && machines.get_opt(MSM).await.ok()?.is_none();
            gone.then_some(())
        },
    )
    .await;
    // Machines return to Waiting and their IPs are released a moment after the free.
    eventually(
        "the simulator to end as it began",
        Duration::from_secs(30),
        || async {
            let now = env.metal_state().await;
            let waiting = now
                .2
                .iter()
                .all(|m| m.allocation.is_none() && m.last_event() == Some(event::WAITING));
            (now.0.is_empty() && now.1 == before.1 && waiting).then_some(())
        },
    )
    .await;
}

fn condition<'a>(
    conditions: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

async fn wait_condition<K, F>(api: &Api<K>, name: &str, what: &str, check: F) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: Fn(&K) -> bool,
{
    eventually(what, Duration::from_secs(60), || async {
        api.get(name).await.ok().filter(|o| check(o))
    })
    .await
}

fn msm_condition(m: &MetalStackMachine, type_: &str, status: &str, reason: &str) -> bool {
    m.status
        .as_ref()
        .and_then(|s| condition(&s.conditions, type_))
        .is_some_and(|c| c.status == status && c.reason == reason)
}

impl Env {
    async fn set_faults(&self, faults: Value) {
        let url = format!("{}/sim/faults", self.sim.url.trim_end_matches("/metal"));
        let response = reqwest::Client::new()
            .put(url)
            .json(&faults)
            .send()
            .await
            .expect("faults");
        assert!(response.status().is_success());
    }

    async fn add_lab_machine(&self, cluster_name: &str, name: &str, secret: &str) {
        self.apply(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
            "metadata": {"name": name},
            "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}
        }))
        .await;
        self.add_owning_machine(cluster_name, name, secret).await;
    }

    async fn add_owning_machine(&self, cluster_name: &str, name: &str, secret: &str) {
        self.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name},
            "spec": {"clusterName": cluster_name, "bootstrap": {"dataSecretName": secret},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": name}}
        }))
        .await;
    }

    async fn add_machine(&self, cluster_name: &str, name: &str, secret: &str, annotations: Value) {
        let mut msm = fixture("metalstackmachine-initial.yaml");
        msm["metadata"]["name"] = json!(name);
        msm["metadata"]["annotations"] = annotations;
        msm["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("providerID");
        self.apply(msm).await;
        self.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name},
            "spec": {"clusterName": cluster_name, "bootstrap": {"dataSecretName": secret},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": name}}
        }))
        .await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_waiting_cause_shows_as_a_condition_and_recovers() {
    let env = Env::start("conditions").await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let msc_condition = |c: &MetalStackCluster, type_: &str, status: &str, reason: &str| {
        c.status
            .as_ref()
            .and_then(|s| condition(&s.conditions, type_))
            .is_some_and(|x| x.status == status && x.reason == reason)
    };

    // No owning Cluster yet.
    env.apply(fixture("metalstackcluster-initial.yaml")).await;
    wait_condition(&clusters, MSC, "WaitingForClusterOwnerRef", |c| {
        msc_condition(c, "Ready", "False", "WaitingForClusterOwnerRef")
    })
    .await;
    assert!(
        env.sim
            .editor()
            .networks()
            .await
            .expect("networks")
            .iter()
            .all(|n| n.parentnetworkid.is_none()),
        "nothing allocated without an owner"
    );

    // metal-api answers 503 to everything: the condition says so; it recovers when it comes back.
    env.set_faults(json!({"error_rate": 1.0})).await;
    env.apply(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": MSC},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": MSC}}
    }))
    .await;
    let down = wait_condition(&clusters, MSC, "metal-api down", |c| {
        msc_condition(c, "NetworkReady", "False", "MetalServerError")
    })
    .await;
    assert!(!down.status.expect("status").ready);
    env.set_faults(json!({})).await;
    wait_condition(&clusters, MSC, "recovery", |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    // A cluster naming a private network metal-api does not have: the condition names the field
    // and the networks that would do.
    let mut bad = fixture("metalstackcluster-initial.yaml");
    bad["metadata"]["name"] = json!("bad-network");
    bad["spec"]["privateNetworkID"] = json!("nowhere");
    bad["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("firewallSpec");
    env.apply_seed_cluster("bad-network", bad).await;
    let network_message = |c: &MetalStackCluster| {
        c.status
            .as_ref()
            .and_then(|s| condition(&s.conditions, "NetworkReady"))
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    let rejected = wait_condition(
        &clusters,
        "bad-network",
        "NetworkReady names the field",
        |c| {
            network_message(c)
                .starts_with("spec.privateNetworkID: network \"nowhere\" does not exist")
        },
    )
    .await;
    assert!(
        network_message(&rejected).contains("valid private networks of the project:"),
        "{}",
        network_message(&rejected)
    );

    // A Machine whose bootstrap Secret does not exist yet.
    env.add_machine(MSC, "worker-a", "worker-a-bootstrap", json!({}))
        .await;
    wait_condition(&machines, "worker-a", "WaitingForBootstrapData", |m| {
        msm_condition(m, "Ready", "False", "WaitingForBootstrapData")
    })
    .await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "worker-a-bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    wait_condition(&machines, "worker-a", "worker-a ready", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    // Paused by annotation, and back.
    let patch = |paused: bool| json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": if paused { json!("") } else { Value::Null }}}});
    machines
        .patch(
            "worker-a",
            &PatchParams::default(),
            &Patch::Merge(&patch(true)),
        )
        .await
        .expect("pause");
    wait_condition(&machines, "worker-a", "Paused", |m| {
        msm_condition(m, "Paused", "True", "Paused")
    })
    .await;
    machines
        .patch(
            "worker-a",
            &PatchParams::default(),
            &Patch::Merge(&patch(false)),
        )
        .await
        .expect("unpause");
    wait_condition(&machines, "worker-a", "NotPaused", |m| {
        msm_condition(m, "Paused", "False", "NotPaused")
    })
    .await;

    // Externally managed: left completely alone.
    env.add_machine(
        MSC,
        "external",
        "worker-a-bootstrap",
        json!({"cluster.x-k8s.io/managed-by": "someone-else"}),
    )
    .await;

    // The partition has three machines: the firewall's, worker-a's and one more. Of two more
    // workers, one finds none: 422 "no machine available", until worker-a is deleted.
    env.add_machine(MSC, "worker-b", "worker-a-bootstrap", json!({}))
        .await;
    env.add_machine(MSC, "worker-c", "worker-a-bootstrap", json!({}))
        .await;
    let no_machine =
        |m: &MetalStackMachine| msm_condition(m, "MachineAllocated", "False", "NoMachineAvailable");
    let starved = eventually(
        "one worker without a machine",
        Duration::from_secs(60),
        || async {
            for name in ["worker-b", "worker-c"] {
                if machines
                    .get(name)
                    .await
                    .ok()
                    .is_some_and(|m| no_machine(&m))
                {
                    return Some(name);
                }
            }
            None
        },
    )
    .await;
    let waiting = machines.get(starved).await.expect("starved worker");
    assert!(
        waiting
            .status
            .expect("status")
            .conditions
            .iter()
            .any(|c| c.message.contains("no machine available"))
    );
    let external = machines.get("external").await.expect("external");
    assert!(
        external.status.is_none() && external.metadata.finalizers.is_none(),
        "managed-by objects are not touched: {external:?}"
    );

    env.dynamic("cluster.x-k8s.io/v1beta2", "Machine", "machines")
        .delete("worker-a", &DeleteParams::default())
        .await
        .expect("delete");
    wait_condition(
        &machines,
        starved,
        "the starved worker gets the freed machine",
        |m| m.status.as_ref().is_some_and(|s| s.ready),
    )
    .await;
    let (_, _, metal_machines) = env.metal_state().await;
    assert_eq!(
        metal_machines
            .iter()
            .filter(|m| m.allocation.is_some())
            .count(),
        3,
        "firewall, worker-b and worker-c"
    );
}

/// Every allocated metal-api machine carries the owner tags of exactly one object, and no object
/// has two machines.
fn assert_one_machine_per_owner(machines: &[Machine]) {
    let mut owners = std::collections::BTreeMap::new();
    for m in machines.iter().filter(|m| m.allocation.is_some()) {
        let owner: Vec<_> = m
            .tags
            .iter()
            .filter(|t| t.contains("-uid="))
            .cloned()
            .collect();
        assert_eq!(owner.len(), 1, "machine {} has owner tags {owner:?}", m.id);
        assert!(
            owners.insert(owner[0].clone(), m.id.clone()).is_none(),
            "two machines for {}",
            owner[0]
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn killing_the_manager_at_any_point_never_allocates_twice() {
    // The default inventory and no preset machines: every allocation is one capms must find
    // again by its owner tags, the ephemeral control-plane IP included.
    let mut env = Env::with_inventory("crash", Inventory::default_lab()).await;
    env.start_capms(&[]);
    let before = env.metal_state().await;
    // Slow metal-api down so that kills land between allocations and status writes.
    env.set_faults(json!({"latency_ms": 120})).await;
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    for worker in ["worker-x", "worker-y"] {
        env.add_lab_machine(MSC, worker, "bootstrap").await;
    }

    for round in 0..14u64 {
        tokio::time::sleep(Duration::from_millis(150 + (round * 211) % 700)).await;
        // Drop kills with SIGKILL and reaps the process.
        drop(env.capms.take());
        env.start_capms(&[]);
    }
    env.set_faults(json!({})).await;

    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    for name in ["worker-x", "worker-y"] {
        wait_ready(&env, &machines, name, |m| {
            m.status.as_ref().is_some_and(|s| s.ready)
        })
        .await;
    }
    let (networks, ips, metal_machines) = env.metal_state().await;
    assert_eq!(networks.len(), 1, "one private network: {networks:?}");
    let cp_ips: Vec<_> = ips
        .iter()
        .filter(|ip| ip.name.ends_with("-control-plane"))
        .collect();
    assert_eq!(cp_ips.len(), 1, "one control-plane IP: {ips:?}");
    assert_eq!(
        metal_machines
            .iter()
            .filter(|m| m.allocation.is_some())
            .count(),
        3,
        "firewall, worker-x, worker-y"
    );
    assert_one_machine_per_owner(&metal_machines);

    let cluster_api = env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
    cluster_api
        .delete(MSC, &DeleteParams::foreground())
        .await
        .expect("delete cluster");
    eventually("everything freed", Duration::from_secs(120), || async {
        let now = env.metal_state().await;
        let waiting = now
            .2
            .iter()
            .all(|m| m.allocation.is_none() && m.last_event() == Some(event::WAITING));
        (cluster_api.get_opt(MSC).await.ok()?.is_none()
            && now.0.is_empty()
            && now.1 == before.1
            && waiting)
            .then_some(())
    })
    .await;
}

async fn reconcile_count(metrics_port: u16) -> Option<u64> {
    let text = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(
        text.lines()
            .filter(|l| l.starts_with("capms_reconcile_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum(),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn only_the_leader_reconciles_and_killing_it_hands_over() {
    capms::tls::install_default_provider();
    let env = Env::without_capms("leader").await;
    let ports = [free_port(), free_port()];
    let election = [
        "--leader-elect",
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=500ms",
    ];
    let spawn = |i: usize| env.spawn_capms(&format!("capms-{i}"), &election, ports[i]);
    let mut managers = [Some(spawn(0)), Some(spawn(1))];
    env.apply_seed_cluster(MSC, fixture("metalstackcluster-initial.yaml"))
        .await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.client(), &env.ns.name);
    let holder = |lease: &k8s_openapi::api::coordination::v1::Lease| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };
    let lease = leases.get("capms-controller-leader").await.expect("lease");
    let leader_pid = holder(&lease)
        .rsplit('-')
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .expect("identity ends with the pid");
    let leader = managers
        .iter()
        .position(|m| m.as_ref().is_some_and(|m| m.pid() == leader_pid))
        .expect("one of ours leads");
    let standby = 1 - leader;
    assert!(
        reconcile_count(ports[leader]).await.unwrap_or(0) > 0,
        "the leader reconciles"
    );
    assert_eq!(
        reconcile_count(ports[standby]).await,
        Some(0),
        "the standby serves metrics but does not reconcile"
    );

    // Kill the leader; the standby takes the lease over and reconciles new work.
    let killed = managers[leader].as_ref().expect("leader").pid();
    drop(managers[leader].take());
    assert!(
        !std::path::Path::new(&format!("/proc/{killed}")).exists(),
        "leader {killed} is gone"
    );
    let standby_pid = managers[standby].as_ref().expect("standby").pid();
    eventually(
        "the standby to take the lease over",
        Duration::from_secs(20),
        || async {
            let lease = leases.get("capms-controller-leader").await.ok()?;
            holder(&lease)
                .ends_with(&format!("-{standby_pid}"))
                .then_some(())
        },
    )
    .await;
    env.apply_seed_machine(MSC).await;
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    wait_ready(&env, &machines, MSM, |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert!(
        reconcile_count(ports[standby]).await.unwrap_or(0) > 0,
        "the new leader reconciles"
    );
}

/// The shipped ClusterRole under a test-unique name, optionally without the `/status` rules.
fn shipped_cluster_role(name: &str, with_status: bool) -> Value {
    let text =
        std::fs::read_to_string(repo_root().join("manifests/rbac/role.yaml")).expect("role.yaml");
    let mut role: Value = serde_saphyr::from_str(&text).expect("YAML");
    role["metadata"]["name"] = json!(name);
    if !with_status {
        let rules: Vec<Value> = role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter(|r| {
                !r["resources"].as_array().is_some_and(|rs| {
                    rs.iter()
                        .any(|x| x.as_str().is_some_and(|x| x.ends_with("/status")))
                })
            })
            .cloned()
            .collect();
        role["rules"] = json!(rules);
    }
    role
}

async fn bind_user(env: &Env, user: &str, role: Value) {
    let client = env.client();
    let role_name = role["metadata"]["name"].as_str().expect("name").to_owned();
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    roles
        .patch(
            &role_name,
            &PatchParams::apply("capms-test").force(),
            &Patch::Apply(&role),
        )
        .await
        .expect("cluster role");
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    });
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client);
    bindings
        .patch(
            user,
            &PatchParams::apply("capms-test").force(),
            &Patch::Apply(&binding),
        )
        .await
        .expect("binding");
}

#[tokio::test(flavor = "current_thread")]
async fn dropped_status_writes_never_allocate_twice_and_the_shipped_rbac_suffices() {
    let mut env = Env::with_inventory("nostatus", Inventory::default_lab()).await;
    let cp = ControlPlane::shared();
    let full = format!("capms-full-{}", env.ns.name);
    let blind = format!("capms-blind-{}", env.ns.name);
    bind_user(&env, &full, shipped_cluster_role(&full, true)).await;
    bind_user(&env, &blind, shipped_cluster_role(&blind, false)).await;
    let full_kubeconfig = cp.user_kubeconfig(&full, env.work.path());
    let blind_kubeconfig = cp.user_kubeconfig(&blind, env.work.path());
    let allocated =
        |machines: &[Machine]| machines.iter().filter(|m| m.allocation.is_some()).count();

    // Phase 1: every status write is refused (403). Network, IP and firewall are still found
    // again by their owner tags on every retry.
    env.kubeconfig = Some(blind_kubeconfig.clone());
    env.start_capms(&[]);
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    eventually(
        "the firewall allocated without any status write",
        Duration::from_secs(60),
        || async {
            let (_, _, machines) = env.metal_state().await;
            (allocated(&machines) == 1).then_some(())
        },
    )
    .await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    assert!(
        clusters.get(MSC).await.expect("msc").status.is_none(),
        "status writes were dropped"
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (networks, ips, machines) = env.metal_state().await;
    assert_eq!(networks.len(), 1, "{networks:?}");
    assert_eq!(
        ips.iter()
            .filter(|ip| ip.name.ends_with("-control-plane"))
            .count(),
        1,
        "{ips:?}"
    );
    assert_eq!(
        allocated(&machines),
        1,
        "still one firewall after repeated reconciles"
    );

    // Phase 2: capms with the shipped ClusterRole finishes the job.
    drop(env.capms.take());
    env.kubeconfig = Some(full_kubeconfig.clone());
    env.start_capms(&[]);
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    // Phase 3: a worker while status writes are refused again, then the shipped role again.
    drop(env.capms.take());
    env.kubeconfig = Some(blind_kubeconfig);
    env.start_capms(&[]);
    env.add_lab_machine(MSC, "worker-z", "bootstrap").await;
    eventually(
        "worker-z allocated without any status write",
        Duration::from_secs(60),
        || async {
            let (_, _, machines) = env.metal_state().await;
            (allocated(&machines) == 2).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (_, _, machines) = env.metal_state().await;
    assert_eq!(allocated(&machines), 2, "one firewall, one worker");
    assert_one_machine_per_owner(&machines);
    drop(env.capms.take());
    env.kubeconfig = Some(full_kubeconfig);
    env.start_capms(&[]);
    let workers: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    wait_ready(&env, &workers, "worker-z", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let (_, _, machines) = env.metal_state().await;
    assert_eq!(allocated(&machines), 2);
    assert_one_machine_per_owner(&machines);
}

#[tokio::test(flavor = "current_thread")]
async fn seed_000_standalone_firewall_reaches_ready() {
    let env = Env::start("firewall").await;
    // The seed's firewall belongs to cluster test1-v8vmn (its cluster-name label); that cluster's
    // MetalStackCluster is the seed's, without a firewallSpec of its own.
    let mut msc = fixture("metalstackcluster-initial.yaml");
    msc["metadata"]["name"] = json!("test1-v8vmn");
    msc["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("firewallSpec");
    env.apply_seed_cluster("test1-v8vmn", msc).await;
    env.apply(fixture("metalstackfirewall-initial.yaml")).await;

    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let fw = wait_ready(&env, &firewalls, "test1-v8vmn", |f| {
        f.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert_eq!(
        fw.spec.provider_id.as_deref(),
        Some("metalstack://2294c949-88f6-5390-8154-fa53d93a3313")
    );
    let machine = env
        .sim
        .editor()
        .firewall(FIREWALL_MACHINE)
        .await
        .expect("the seed's firewall machine is a firewall now");
    assert_eq!(machine.last_event(), Some(event::PHONED_HOME));
}

#[tokio::test(flavor = "current_thread")]
async fn a_cluster_waits_for_its_firewall_template_then_clones_it() {
    let mut env = Env::with_inventory("fwtemplate", Inventory::default_lab()).await;
    // capms runs with the shipped ClusterRole, so its rule for firewall templates is proven too.
    let user = format!("capms-{}", env.ns.name);
    bind_user(&env, &user, shipped_cluster_role(&user, true)).await;
    env.kubeconfig = Some(ControlPlane::shared().user_kubeconfig(&user, env.work.path()));
    env.start_capms(&[]);

    let mut msc = lab_cluster();
    let inline = msc["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("firewallSpec")
        .expect("the lab cluster has a firewallSpec");
    msc["spec"]["firewallTemplateRef"] = json!({"name": "edge"});
    env.apply_seed_cluster(MSC, msc).await;

    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let waiting = wait_condition(
        &clusters,
        MSC,
        "FirewallReady=False/FirewallTemplateNotFound",
        |c| {
            c.status
                .as_ref()
                .and_then(|s| condition(&s.conditions, "FirewallReady"))
                .is_some_and(|c| c.status == "False" && c.reason == "FirewallTemplateNotFound")
        },
    )
    .await;
    let message = &condition(
        &waiting.status.as_ref().expect("status").conditions,
        "FirewallReady",
    )
    .expect("condition")
    .message;
    assert!(
        message.contains("spec.firewallTemplateRef")
            && message.contains("edge")
            && message.ends_with("templates in the namespace: none"),
        "{message}"
    );
    // Let the reconciles that Cluster API's own updates cause die down, so that only the
    // template watch can wake the cluster in time.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (_, _, machines) = env.metal_state().await;
    assert!(
        machines.iter().all(|m| m.allocation.is_none()),
        "no firewall without its template"
    );

    env.apply(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackFirewallTemplate",
        "metadata": {"name": "edge"},
        "spec": {"template": {"metadata": {"labels": {"team": "net"}}, "spec": inline}}
    }))
    .await;
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    // The template watch wakes the cluster at once (the safety-net requeue is 5 minutes away).
    eventually(
        "the firewall created from the template",
        Duration::from_secs(30),
        || async { firewalls.get_opt(&format!("{MSC}-firewall")).await.ok()? },
    )
    .await;
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let fw = firewalls
        .get(&format!("{MSC}-firewall"))
        .await
        .expect("the cluster's firewall");
    let mut spec = serde_json::to_value(&fw.spec).expect("json");
    assert!(
        spec.as_object_mut()
            .expect("spec")
            .remove("providerID")
            .is_some(),
        "the allocated machine is recorded"
    );
    assert_eq!(spec, inline, "the firewall has the template's spec");
    let labels = fw.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("net"));
    assert_eq!(
        labels
            .get("cluster.x-k8s.io/cluster-name")
            .map(String::as_str),
        Some(MSC)
    );
    assert_eq!(
        fw.metadata
            .annotations
            .unwrap_or_default()
            .get("cluster.x-k8s.io/cloned-from-name")
            .map(String::as_str),
        Some("edge")
    );
    let (_, _, machines) = env.metal_state().await;
    assert_eq!(
        machines.iter().filter(|m| m.allocation.is_some()).count(),
        1,
        "one firewall"
    );
}
