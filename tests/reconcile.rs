//! Reconciles in-process, in milliseconds: each controller's `reconcile` runs against a mock
//! apiserver (`reconcile/mock.rs`) and the simulator in-process. Every reconcile takes at most
//! one external write and writes its status at most once; the tests walk a cluster and a
//! machine from nothing to ready and back, step by step. The real-apiserver end-to-end tests
//! (`controllers.rs`) stay.

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

#[path = "reconcile/mock.rs"]
mod mock;
mod support;

use capms::api::{
    ApiEndpoint, MetalStackCluster, MetalStackClusterSpec, MetalStackFirewall,
    MetalStackFirewallSpec, MetalStackMachine, MetalStackMachineSpec,
};
use capms::capi::{Bootstrap, Cluster, ClusterSpec, ContractRef, Machine, MachineSpec};
use capms::controllers::cluster::Clusters;
use capms::controllers::firewall::Firewalls;
use capms::controllers::machine::Machines;
use capms::controllers::step::{Reconciler, reconcile};
use capms::controllers::{Context, Settings};
use capms::sim::inventory::Inventory;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::Resource;
use kube::runtime::controller::Action;
use mock::{MockApiserver, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::RunningSim;

const NS: &str = "team-a";
const PROJECT: &str = "00000000-0000-0000-0000-000000000001";

struct Rig {
    api: MockApiserver,
    sim: RunningSim,
    ctx: Arc<Context>,
}

async fn rig() -> Rig {
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let api = MockApiserver::default();
    let metrics = Arc::new(capms::metrics::Metrics::new());
    let ctx = Context::new(
        api.client(),
        sim.editor(),
        Settings::default(),
        None,
        metrics,
    );
    Rig {
        api,
        sim,
        ctx: Arc::new(ctx),
    }
}

fn owner(kind: &str, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        controller: Some(true),
        ..Default::default()
    }
}

fn capi_cluster() -> Cluster {
    let mut c = Cluster::new(
        "prod",
        ClusterSpec {
            paused: None,
            infrastructure_ref: Some(ContractRef {
                api_group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "MetalStackCluster".into(),
                name: "prod".into(),
            }),
        },
    );
    c.metadata.namespace = Some(NS.into());
    c
}

fn metal_stack_cluster(firewall: Option<MetalStackFirewallSpec>) -> MetalStackCluster {
    let mut msc = MetalStackCluster::new(
        "prod",
        MetalStackClusterSpec {
            partition: "mini-lab".into(),
            project_id: PROJECT.into(),
            public_network_id: "internet-mini-lab".into(),
            control_plane_endpoint: Some(ApiEndpoint {
                host: None,
                port: Some(6443),
            }),
            firewall_spec: firewall,
            ..Default::default()
        },
    );
    msc.metadata.namespace = Some(NS.into());
    msc.metadata.uid = Some("uid-msc".into());
    msc.metadata.generation = Some(1);
    msc.metadata.owner_references = Some(vec![owner("Cluster", "prod")]);
    msc
}

/// Reconciles `obj` as stored until `done` says so (at most `limit` times); returns each
/// reconcile's writes (events left out) and the last Action.
async fn walk<R: Reconciler>(
    rig: &Rig,
    obj: &R::Object,
    limit: usize,
    done: impl Fn(&R::Object) -> bool,
) -> (Vec<Vec<Write>>, Action)
where
    R::Object: serde::Serialize,
{
    let mut rounds = Vec::new();
    for _ in 0..limit {
        let current = rig.api.get(obj);
        let action = reconcile::<R>(Arc::new(current), rig.ctx.clone())
            .await
            .expect("reconcile");
        let writes: Vec<Write> = rig
            .api
            .take_writes()
            .into_iter()
            .filter(|w| !w.is_event())
            .collect();
        let external = writes.iter().filter(|w| !w.is_status()).count();
        assert!(
            external <= 1,
            "one external write per reconcile: {writes:#?}"
        );
        assert!(
            writes.iter().filter(|w| w.is_status()).count() <= 1,
            "one status write per reconcile: {writes:#?}"
        );
        rounds.push(writes);
        if done(&rig.api.get(obj)) {
            return (rounds, action);
        }
    }
    panic!("not done after {limit} reconciles: {rounds:#?}");
}

fn ready(msc: &MetalStackCluster) -> bool {
    msc.status.as_ref().is_some_and(|s| s.ready)
}

#[tokio::test]
async fn a_cluster_walks_from_nothing_to_ready_one_write_at_a_time() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    rig.api.put(&capi_cluster());
    rig.api.put(&msc);
    let (rounds, last) = walk::<Clusters>(&rig, &msc, 8, ready).await;
    // finalizer, network, IP, endpoint (+ the status that says ready).
    let external: Vec<String> = rounds
        .iter()
        .flatten()
        .filter(|w| !w.is_status())
        .map(|w| format!("{} {}", w.method, w.content_type))
        .collect();
    assert_eq!(
        external,
        [
            "PATCH application/json-patch+json",
            "PATCH application/merge-patch+json"
        ],
        "the finalizer and the endpoint are the only object writes"
    );
    assert_eq!(last, Action::requeue(Duration::from_secs(300)));
    let done = rig.api.get(&msc);
    let status = done.status.expect("status");
    let network = status.network_id.clone().expect("network");
    let endpoint = done.spec.control_plane_endpoint.expect("endpoint");
    assert_eq!(status.allocated_control_plane_ip, endpoint.host);
    let editor = rig.sim.editor();
    let allocated = editor.network(&network).await.expect("the network exists");
    assert_eq!(allocated.projectid, PROJECT);
    let ip = editor
        .ip(endpoint.host.as_deref().expect("host"))
        .await
        .expect("the IP exists");
    assert!(ip.ipaddress.starts_with("127."), "loopback only");

    // Ready and unchanged: a reconcile reads, and writes nothing at all.
    let again = reconcile::<Clusters>(Arc::new(rig.api.get(&msc)), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(again, Action::requeue(Duration::from_secs(300)));
    assert!(rig.api.take_writes().is_empty(), "nothing to write");
}

#[tokio::test]
async fn refused_status_writes_hold_up_nothing_and_allocate_nothing_twice() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    rig.api.put(&capi_cluster());
    rig.api.put(&msc);
    rig.api.refuse_status.store(true, Ordering::SeqCst);
    let mut outcomes = Vec::new();
    let endpoint_written = |c: &MetalStackCluster| {
        c.spec
            .control_plane_endpoint
            .as_ref()
            .is_some_and(|e| e.host.is_some())
    };
    for _ in 0..8 {
        let current = rig.api.get(&msc);
        if endpoint_written(&current) {
            break;
        }
        // A refused status write fails the reconcile unless a metal-api step was just taken:
        // then the next reconcile comes at once, without backoff.
        let outcome = reconcile::<Clusters>(Arc::new(current), rig.ctx.clone()).await;
        outcomes.push(outcome.map_err(|e| e.to_string()));
    }
    let at_once = outcomes
        .iter()
        .filter(|o| o.as_ref().ok() == Some(&Action::requeue(Duration::ZERO)))
        .count();
    assert_eq!(
        at_once, 2,
        "network and IP allocated, each observed at once: {outcomes:?}"
    );
    let current = rig.api.get(&msc);
    assert!(endpoint_written(&current), "provisioned without any status");
    assert!(current.status.is_none());
    rig.api.refuse_status.store(false, Ordering::SeqCst);
    rig.api.take_writes();
    walk::<Clusters>(&rig, &msc, 3, ready).await;
    let editor = rig.sim.editor();
    let ours = |labels: &std::collections::BTreeMap<String, String>| {
        labels.values().any(|v| v == "uid-msc")
    };
    let networks = editor.networks().await.expect("networks");
    assert_eq!(
        networks.iter().filter(|n| ours(&n.labels)).count(),
        1,
        "one network"
    );
    let ips = editor
        .ip_find(&capms::metal::types::IpFindRequest::default())
        .await
        .expect("ips");
    assert_eq!(
        ips.iter()
            .filter(|ip| ip.tags.iter().any(|t| t.ends_with("=uid-msc")))
            .count(),
        1,
        "one control-plane IP"
    );
}

#[tokio::test]
async fn the_firewall_follows_the_cluster_spec_until_it_is_allocated() {
    let rig = rig().await;
    let spec = MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        ..Default::default()
    };
    let mut msc = metal_stack_cluster(Some(spec));
    rig.api.put(&capi_cluster());
    rig.api.put(&msc);
    let has_firewall = |c: &MetalStackCluster| {
        c.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "FirewallReady" && c.reason == "FirewallCreated")
        })
    };
    walk::<Clusters>(&rig, &msc, 8, has_firewall).await;
    let mut fw = MetalStackFirewall::new("prod-firewall", MetalStackFirewallSpec::default());
    fw.metadata.namespace = Some(NS.into());
    assert_eq!(rig.api.get(&fw).spec.image, "firewall-ubuntu-3.0");

    // An edit before the firewall is allocated reaches it.
    msc = rig.api.get(&msc);
    if let Some(s) = msc.spec.firewall_spec.as_mut() {
        s.machine_type = "v1-large-x86".into();
    }
    msc.metadata.generation = Some(2);
    rig.api.put(&msc);
    reconcile::<Clusters>(Arc::new(rig.api.get(&msc)), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(rig.api.get(&fw).spec.machine_type, "v1-large-x86");
    assert!(
        rig.api
            .take_writes()
            .iter()
            .any(|w| w.content_type == "application/apply-patch+yaml"
                && w.path.ends_with("/metalstackfirewalls/prod-firewall")),
        "applied by server-side apply"
    );

    // Once allocated, the firewall keeps its spec and the cluster says why.
    let mut allocated = rig.api.get(&fw);
    allocated.spec.provider_id =
        Some("metal://mini-lab/00000000-0000-0000-0000-000000000001".into());
    rig.api.put(&allocated);
    if let Some(s) = msc.spec.firewall_spec.as_mut() {
        s.machine_type = "v1-small-x86".into();
    }
    rig.api.put(&msc);
    reconcile::<Clusters>(Arc::new(rig.api.get(&msc)), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(
        rig.api.get(&fw).spec.machine_type,
        "v1-large-x86",
        "not applied"
    );
    let status = rig.api.get(&msc).status.expect("status");
    let firewall_ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "FirewallReady")
        .expect("FirewallReady");
    assert_eq!(firewall_ready.reason, "FirewallSpecChanged");
}

fn capi_machine() -> Machine {
    let mut m = Machine::new(
        "worker-0",
        MachineSpec {
            cluster_name: "prod".into(),
            bootstrap: Bootstrap {
                data_secret_name: Some("worker-0-bootstrap".into()),
            },
            ..Default::default()
        },
    );
    m.metadata.namespace = Some(NS.into());
    m
}

fn bootstrap() -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some("worker-0-bootstrap".into());
    s.metadata.namespace = Some(NS.into());
    s.data = Some(
        [(
            "value".to_owned(),
            ByteString(b"#cloud-config\nhostname: node-1\n".to_vec()),
        )]
        .into(),
    );
    s
}

fn metal_stack_machine() -> MetalStackMachine {
    let mut msm = MetalStackMachine::new(
        "worker-0",
        MetalStackMachineSpec {
            image: "ubuntu-26.4".into(),
            machine_type: "v1-small-x86".into(),
            ..Default::default()
        },
    );
    msm.metadata.namespace = Some(NS.into());
    msm.metadata.uid = Some("uid-msm".into());
    msm.metadata.owner_references = Some(vec![owner("Machine", "worker-0")]);
    msm
}

#[tokio::test]
async fn a_machine_is_allocated_named_ready_and_freed() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    rig.api.put(&capi_cluster());
    rig.api.put(&msc);
    walk::<Clusters>(&rig, &msc, 8, ready).await;
    rig.api.put(&capi_machine());
    rig.api.put(&bootstrap());
    let msm = metal_stack_machine();
    rig.api.put(&msm);
    let provisioned = |m: &MetalStackMachine| m.status.as_ref().is_some_and(|s| s.ready);
    // The simulator installs machines in the background: poll as the backoff would.
    let mut rounds = 0;
    while !provisioned(&rig.api.get(&msm)) {
        rounds += 1;
        assert!(rounds < 200, "not ready: {:?}", rig.api.get(&msm).status);
        let _ = walk::<Machines>(&rig, &msm, 1, |_| true).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = rig.api.get(&msm);
    let provider_id = ready.spec.provider_id.clone().expect("named");
    let machine_id = provider_id.rsplit('/').next().expect("id").to_owned();
    let machine = rig
        .sim
        .editor()
        .machine(&machine_id)
        .await
        .expect("machine");
    let allocation = machine.allocation.expect("allocated");
    assert_eq!(allocation.hostname, "node-1", "from the cloud-config");
    assert!(ready.labels_contain_rack(), "rack label");

    // Deleted: the machine is freed, then the finalizer goes.
    let mut deleting = rig.api.get(&msm);
    deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    rig.api.put(&deleting);
    walk::<Machines>(&rig, &msm, 3, |m| {
        m.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
    })
    .await;
    let freed = rig
        .sim
        .editor()
        .machine(&machine_id)
        .await
        .expect("machine");
    assert!(freed.allocation.is_none(), "freed");
}

trait RackLabel {
    fn labels_contain_rack(&self) -> bool;
}

impl RackLabel for MetalStackMachine {
    fn labels_contain_rack(&self) -> bool {
        self.meta()
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(capms::controllers::machine::RACK_LABEL))
    }
}

#[tokio::test]
async fn objects_managed_by_someone_else_are_never_written() {
    let rig = rig().await;
    let mut msm = metal_stack_machine();
    msm.metadata.annotations = Some(
        [(
            capms::capi::MANAGED_BY_ANNOTATION.to_owned(),
            "other".to_owned(),
        )]
        .into(),
    );
    rig.api.put(&msm);
    let mut fw = MetalStackFirewall::new("fw", MetalStackFirewallSpec::default());
    fw.metadata.namespace = Some(NS.into());
    fw.metadata.annotations = msm.metadata.annotations.clone();
    rig.api.put(&fw);
    let action = reconcile::<Machines>(Arc::new(msm), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(action, Action::await_change());
    reconcile::<Firewalls>(Arc::new(fw), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert!(rig.api.take_writes().is_empty());
}

/// Provisions the cluster and one machine; returns the machine's metal-api id.
async fn provisioned_machine(rig: &Rig, msc: &MetalStackCluster) -> String {
    rig.api.put(&capi_cluster());
    rig.api.put(msc);
    walk::<Clusters>(rig, msc, 8, ready).await;
    rig.api.put(&capi_machine());
    rig.api.put(&bootstrap());
    let msm = metal_stack_machine();
    rig.api.put(&msm);
    walk::<Machines>(rig, &msm, 4, |m| m.spec.provider_id.is_some()).await;
    let named = rig.api.get(&msm).spec.provider_id.expect("named");
    named.rsplit('/').next().expect("id").to_owned()
}

/// Marks the stored `obj` deleted, as the apiserver does while finalizers hold it.
fn mark_deleted<K>(rig: &Rig, obj: &K, annotation: Option<&str>)
where
    K: Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut stored = rig.api.get(obj);
    stored.meta_mut().deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    if let Some(a) = annotation {
        stored
            .meta_mut()
            .annotations
            .get_or_insert_with(Default::default)
            .insert(a.to_owned(), String::new());
    }
    rig.api.put(&stored);
}

#[tokio::test]
async fn deletions_while_paused_or_moved_away_free_nothing_and_write_nothing() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    let machine_id = provisioned_machine(&rig, &msc).await;
    let msm = metal_stack_machine();
    let network = rig
        .api
        .get(&msc)
        .status
        .and_then(|s| s.network_id)
        .expect("network");
    rig.api.take_writes();

    // clusterctl move deletes the source's objects with its annotation after moving them.
    mark_deleted(&rig, &msm, Some(capms::capi::DELETE_FOR_MOVE_ANNOTATION));
    let action = reconcile::<Machines>(Arc::new(rig.api.get(&msm)), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));

    // A paused Cluster: its MetalStackCluster's deletion waits too.
    let mut paused = capi_cluster();
    paused.spec.paused = Some(true);
    rig.api.put(&paused);
    mark_deleted(&rig, &msc, None);
    reconcile::<Clusters>(Arc::new(rig.api.get(&msc)), rig.ctx.clone())
        .await
        .expect("reconcile");
    let writes: Vec<Write> = rig.api.take_writes();
    assert!(writes.is_empty(), "hands off: {writes:#?}");
    let editor = rig.sim.editor();
    let machine = editor.machine(&machine_id).await.expect("machine");
    assert!(
        machine.allocation.is_some(),
        "the machine is still allocated"
    );
    editor
        .network(&network)
        .await
        .expect("the network is still there");
    assert!(
        rig.api
            .get(&msm)
            .metadata
            .finalizers
            .is_some_and(|f| !f.is_empty())
    );

    // Unpaused, a deletion of the cluster's own objects goes ahead.
    rig.api.put(&capi_cluster());
    let plain = {
        let mut m = rig.api.get(&msm);
        m.metadata.annotations = None;
        m
    };
    rig.api.put(&plain);
    walk::<Machines>(&rig, &msm, 3, |m| {
        m.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
    })
    .await;
    let freed = editor.machine(&machine_id).await.expect("machine");
    assert!(freed.allocation.is_none(), "freed once unpaused");
}

#[tokio::test]
async fn a_machine_freed_behind_capms_back_is_reported_not_replaced() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    let machine_id = provisioned_machine(&rig, &msc).await;
    let msm = metal_stack_machine();
    let editor = rig.sim.editor();
    let allocated = || async {
        let all = editor
            .machine_find(&Default::default())
            .await
            .expect("machines");
        all.iter().filter(|m| m.allocation.is_some()).count()
    };
    let before = allocated().await;
    editor
        .machine_free(&machine_id)
        .await
        .expect("freed outside capms");
    for _ in 0..3 {
        reconcile::<Machines>(Arc::new(rig.api.get(&msm)), rig.ctx.clone())
            .await
            .expect("reconcile");
    }
    assert_eq!(allocated().await, before - 1, "no replacement allocated");
    let status = rig.api.get(&msm).status.expect("status");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "MachineLost")
    );
    assert!(ready.message.contains(&machine_id), "{}", ready.message);
    assert_eq!(status.failure_reason.as_deref(), Some("UpdateError"));
}

/// What the simulator holds: (networks, IPs, allocated machines).
async fn allocations(rig: &Rig) -> (usize, usize, usize) {
    let editor = rig.sim.editor();
    let networks = editor.networks().await.expect("networks");
    let ips = editor
        .ip_find(&capms::metal::types::IpFindRequest::default())
        .await
        .expect("ips");
    let machines = editor
        .machine_find(&Default::default())
        .await
        .expect("machines");
    (
        networks
            .iter()
            .filter(|n| n.parentnetworkid.is_some())
            .count(),
        ips.len(),
        machines.iter().filter(|m| m.allocation.is_some()).count(),
    )
}

/// As a restore from backup (or clusterctl move) leaves an object: the spec, a new UID, no
/// status, no finalizers.
fn restored<K>(rig: &Rig, obj: &K, uid: &str) -> K
where
    K: Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut value = serde_json::to_value(rig.api.get(obj)).expect("json");
    if let Some(o) = value.as_object_mut() {
        o.remove("status");
    }
    value["metadata"]["uid"] = serde_json::json!(uid);
    value["metadata"]["finalizers"] = serde_json::Value::Null;
    let again: K = serde_json::from_value(value).expect("typed");
    rig.api.put(&again);
    again
}

#[tokio::test]
async fn restored_objects_adopt_what_they_had_and_allocate_nothing() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    let machine_id = provisioned_machine(&rig, &msc).await;
    let msm = metal_stack_machine();
    let before = allocations(&rig).await;
    assert_eq!(before.0, 1, "one private network");

    let msc = restored(&rig, &msc, "uid-msc-restored");
    let msm = restored(&rig, &msm, "uid-msm-restored");
    walk::<Clusters>(&rig, &msc, 6, ready).await;
    walk::<Machines>(&rig, &msm, 6, |m| {
        m.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "MachineAllocated" && c.status == "True")
        })
    })
    .await;
    assert_eq!(allocations(&rig).await, before, "zero new allocations");
    let adopted = rig.api.get(&msm);
    assert!(
        adopted
            .spec
            .provider_id
            .is_some_and(|p| p.ends_with(&machine_id)),
        "the same machine"
    );
}
