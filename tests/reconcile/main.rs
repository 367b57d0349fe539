//! Reconciles in-process, in milliseconds: each controller's `reconcile` runs against a mock
//! apiserver (`reconcile/mock.rs`) and the simulator in-process. Every reconcile takes at most
//! one external write and writes its status at most once; the tests walk a cluster and a
//! machine from nothing to ready and back, step by step. The real-apiserver end-to-end tests
//! (`controllers.rs`) stay.

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support as support;
use capms_test_support::mock_apiserver as mock;

use capms::api::{
    ApiEndpoint, MetalStackCluster, MetalStackClusterSpec, MetalStackFirewall,
    MetalStackFirewallSpec, MetalStackMachine, MetalStackMachineSpec,
};
use capms::cache::catalog::CatalogCache;
use capms::cache::catalogs::Catalogs;
use capms::cache::credentials::MetalClients;
use capms::capi::{Bootstrap, Cluster, ClusterSpec, ContractRef, Machine, MachineSpec};
use capms::controllers::cluster::Clusters;
use capms::controllers::firewall::Firewalls;
use capms::controllers::machine::Machines;
use capms::reconciler::{Context, Reconciler, Settings, reconcile};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::Resource;
use kube::runtime::controller::Action;
use metal_sim::inventory::Inventory;
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
    rig_with(Settings::default()).await
}

async fn rig_with(settings: Settings) -> Rig {
    rig_timed(settings, metal_sim::Timings::fast()).await
}

/// A rig whose simulated machines take `timings` through their lifecycle.
async fn rig_timed(settings: Settings, timings: metal_sim::Timings) -> Rig {
    let sim = RunningSim::start_with(Inventory::default_lab(), "/metal", timings).await;
    let api = MockApiserver::default();
    let metrics = Arc::new(capms::metrics::Metrics::new());
    let clients = MetalClients::new(sim.editor(), api.client());
    let own = CatalogCache::new(sim.editor(), Duration::from_secs(300));
    let catalogs = Catalogs::new(own, Arc::new(clients), Duration::from_secs(300));
    let ctx = Context::new(api.client(), settings, None, metrics, catalogs);
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
            public_network_id: Some("internet-mini-lab".into()),
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
        let writes = rig.api.take_object_writes();
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

/// A rig that holds a Cluster and its new MetalStackCluster (no firewall).
async fn cluster_rig() -> (Rig, MetalStackCluster) {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    rig.api.put(&capi_cluster());
    rig.api.put(&msc);
    (rig, msc)
}

/// A provisioned cluster with one Machine, its bootstrap Secret and its new MetalStackMachine.
async fn machine_rig() -> (Rig, MetalStackMachine) {
    let (rig, msc) = cluster_rig().await;
    walk::<Clusters>(&rig, &msc, 8, ready).await;
    rig.api.put(&capi_machine());
    rig.api.put(&bootstrap());
    let msm = metal_stack_machine();
    rig.api.put(&msm);
    (rig, msm)
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

mod catalog;
mod credentials;
mod gates;
mod handoffs;
mod listing;
mod ownership;
mod provisioning;
