//! The crash points' orphans: what a leak leaves in metal-api for a cluster capms manages (a
//! Cluster whose MetalStackCluster is gone), for the orphan sweep to free.

use super::*;
use crate::orphans::{allocated, marks};
use capms::ownership::{OwnerKind, owner_marks, owner_tags};
use metal_api::types::{IpAllocateRequest, NetworkAllocateRequest};

/// The lives' orphan sweep: every second, freeing what has been orphaned for a second.
pub(super) const SWEEPING: [&str; 2] = ["--orphan-sweep-interval=1s", "--orphan-grace=1s"];

const ORPHANS: &str = "orphans";

/// A Cluster whose MetalStackCluster is gone, with a private network, a control-plane IP and a
/// machine of a MetalStackMachine that is gone: freed by the sweep, life after life.
pub(super) async fn orphans_freed(env: &Env, lives: &mut Lives) {
    let ns = env.ns.name.clone();
    env.apply(json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": ORPHANS},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackCluster", "name": ORPHANS}}}))
    .await;
    let id = format!("{ns}.{ORPHANS}");
    let mut cluster_marks = owner_marks(OwnerKind::Cluster, &ns, ORPHANS, "uid-gone");
    cluster_marks.insert("cluster.metal-stack.io/id".into(), id.clone());
    let (network, ip) = {
        let mut state = env.sim.sim.state();
        let network = state.network_allocate(&NetworkAllocateRequest {
            projectid: "00000000-0000-0000-0000-000000000001".into(),
            partitionid: "mini-lab".into(),
            name: ORPHANS.into(),
            labels: cluster_marks.clone(),
            ..Default::default()
        });
        let ip = state.ip_allocate(
            &IpAllocateRequest {
                networkid: "internet-mini-lab".into(),
                projectid: "00000000-0000-0000-0000-000000000001".into(),
                type_: "ephemeral".into(),
                name: format!("{ORPHANS}-control-plane"),
                tags: owner_tags(&cluster_marks),
                ..Default::default()
            },
            None,
        );
        (network.expect("network").id, ip.expect("ip").ipaddress)
    };
    let machine = allocated(env, &network, marks(&ns, "gone", &id, true));
    let freed = || async {
        let state = env.sim.sim.state();
        let machine_freed = state
            .machine(&machine)
            .is_ok_and(|m| m.allocation.is_none());
        machine_freed && state.network(&network).is_err() && state.ip(&ip).is_err()
    };
    lives.until(env, "orphans", freed).await;
}
