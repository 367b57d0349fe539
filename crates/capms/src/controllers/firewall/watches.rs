//! What wakes a MetalStackFirewall: its own changes (not its status), the MetalStackCluster it
//! belongs to, its Cluster's gates (paused, infrastructure provisioned, deletion) and its
//! machine changing stage in metal-api.

use crate::api::{MetalStackCluster, MetalStackFirewall};
use crate::cache::watch::own_change;
use crate::capi::Cluster;
use crate::controllers::Watches;
use crate::controllers::cluster::{belongs_to, firewall_name};
use crate::controllers::watches::cluster_gates;
use crate::ownership::OwnerKind;
use crate::reconciler::Context;
use crate::reconciler::queue::{counted, counted_own, counted_refs};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::Arc;

/// The MetalStackFirewall controller, woken by everything above.
pub fn controller(watches: &mut Watches, ctx: &Context) -> Controller<MetalStackFirewall> {
    let queues = &ctx.metrics.queues;
    let own = watches.firewalls.follow_changes(own_change);
    let by_cluster = watches.firewalls.store();
    let by_gates = by_cluster.clone();
    Controller::for_shared_stream(counted_own(queues, own), watches.firewalls.store())
        .reconcile_on(counted_refs(
            queues,
            ctx.listings.follow(OwnerKind::Firewall),
        ))
        .watches_shared_stream(
            watches.metal_stack_clusters.follow(),
            counted(queues, move |c: Arc<MetalStackCluster>| {
                let ns = c.namespace().unwrap_or_default();
                firewalls_of(&by_cluster, &ns, &c.name_any())
            }),
        )
        .watches_shared_stream(
            watches.clusters.follow_changes(cluster_gates),
            counted(queues, move |c: Arc<Cluster>| {
                let ns = c.namespace().unwrap_or_default();
                let msc = c.metal_stack_cluster().unwrap_or_default();
                firewalls_of(&by_gates, &ns, msc)
            }),
        )
}

/// The MetalStackFirewalls of MetalStackCluster `msc` in `ns`: its first one (named after it,
/// which may not be stored yet) and every other it is the controller of (a rollout's).
pub(crate) fn firewalls_of(
    store: &Store<MetalStackFirewall>,
    ns: &str,
    msc: &str,
) -> Vec<ObjectRef<MetalStackFirewall>> {
    if msc.is_empty() {
        return Vec::new();
    }
    let first = ObjectRef::new(&firewall_name(msc)).within(ns);
    let rolled = store
        .state()
        .into_iter()
        .filter(|f| f.namespace().as_deref() == Some(ns) && belongs_to(f, msc))
        .map(|f| ObjectRef::from_obj(f.as_ref()))
        .filter(|r| r.name != first.name);
    std::iter::once(first.clone()).chain(rolled).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::watches::test_cluster as cluster;

    #[test]
    fn a_clusters_firewalls_are_its_first_and_those_it_controls() {
        let (writer_store, mut writer) = {
            let (reader, writer) = kube::runtime::reflector::store::<MetalStackFirewall>();
            (reader, writer)
        };
        let owned = |name: &str, owner: &str| {
            let mut fw = MetalStackFirewall::new(name, Default::default());
            fw.metadata.namespace = Some("ns".into());
            fw.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "infrastructure.cluster.x-k8s.io/v1alpha4".into(),
                    kind: "MetalStackCluster".into(),
                    name: owner.into(),
                    uid: "u".into(),
                    controller: Some(true),
                    ..Default::default()
                },
            ]);
            fw
        };
        for fw in [
            owned("msc-firewall", "msc"),
            owned("msc-firewall-0a1b2c3d", "msc"),
            owned("other-firewall", "other"),
        ] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(fw));
        }
        let mut names: Vec<String> = firewalls_of(&writer_store, "ns", "msc")
            .into_iter()
            .map(|r| r.name)
            .collect();
        names.sort();
        assert_eq!(names, ["msc-firewall", "msc-firewall-0a1b2c3d"]);
        let mut c = cluster(false, None);
        c.spec.infrastructure_ref = Some(crate::capi::ContractRef {
            kind: "MetalStackCluster".into(),
            name: "msc".into(),
            ..Default::default()
        });
        assert_eq!(c.metal_stack_cluster(), Some("msc"));
        assert!(firewalls_of(&writer_store, "ns", "").is_empty());
    }
}
