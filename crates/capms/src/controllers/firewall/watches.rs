//! What wakes a MetalStackFirewall: its own changes (not its status), the MetalStackCluster it
//! belongs to, its Cluster's gates (paused, infrastructure provisioned, deletion) and its
//! machine changing stage in metal-api.

use crate::api::{MetalStackCluster, MetalStackFirewall};
use crate::cache::watch::own_change;
use crate::capi::Cluster;
use crate::controllers::Watches;
use crate::controllers::cluster::firewall_name;
use crate::controllers::watches::cluster_gates;
use crate::ownership::OwnerKind;
use crate::reconciler::Context;
use crate::reconciler::queue::{counted, counted_own, counted_refs};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;

/// The MetalStackFirewall controller, woken by everything above.
pub fn controller(watches: &mut Watches, ctx: &Context) -> Controller<MetalStackFirewall> {
    let queues = &ctx.metrics.queues;
    let own = watches.firewalls.follow_changes(own_change);
    Controller::for_shared_stream(counted_own(queues, own), watches.firewalls.store())
        .reconcile_on(counted_refs(
            queues,
            ctx.listings.follow(OwnerKind::Firewall),
        ))
        .watches_shared_stream(
            watches.metal_stack_clusters.follow(),
            counted(queues, |c: Arc<MetalStackCluster>| {
                let ns = c.namespace().unwrap_or_default();
                let name = firewall_name(&c.name_any());
                Some(ObjectRef::<MetalStackFirewall>::new(&name).within(&ns))
            }),
        )
        .watches_shared_stream(
            watches.clusters.follow_changes(cluster_gates),
            counted(queues, |c: Arc<Cluster>| firewall_of(&c)),
        )
}

/// The MetalStackFirewall of `cluster`: the one its MetalStackCluster owns.
pub fn firewall_of(cluster: &Cluster) -> Option<ObjectRef<MetalStackFirewall>> {
    let ns = cluster.namespace().unwrap_or_default();
    let msc = cluster.metal_stack_cluster()?;
    Some(ObjectRef::new(&firewall_name(msc)).within(&ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::watches::test_cluster as cluster;

    #[test]
    fn a_clusters_firewall_is_named_after_its_metal_stack_cluster() {
        let mut c = cluster(false, None);
        c.spec.infrastructure_ref = Some(crate::capi::ContractRef {
            kind: "MetalStackCluster".into(),
            name: "msc".into(),
            ..Default::default()
        });
        let fw = firewall_of(&c).unwrap_or_else(|| panic!("a firewall"));
        assert_eq!(
            (fw.name.as_str(), fw.namespace.as_deref()),
            ("msc-firewall", Some("ns"))
        );
        assert!(firewall_of(&cluster(false, None)).is_none());
    }
}
