//! What wakes a MetalStackCluster: its own changes (not its status), its firewall, its
//! Cluster's gates and the firewall template it names.

use crate::api::{MetalStackCluster, MetalStackFirewall, MetalStackFirewallTemplate};
use crate::cache::watch::own_change;
use crate::capi::Cluster;
use crate::controllers::Watches;
use crate::controllers::watches::cluster_gates;
use crate::reconciler::Context;
use crate::reconciler::queue::{counted, counted_own};
use kube::runtime::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::sync::Arc;

/// The MetalStackCluster controller, woken by everything above.
pub fn controller(watches: &mut Watches, ctx: &Context) -> Controller<MetalStackCluster> {
    let queues = &ctx.metrics.queues;
    let own = watches.metal_stack_clusters.follow_changes(own_change);
    // A cluster waiting for its firewall template goes on as soon as the template appears.
    let referencing = watches.metal_stack_clusters.store();
    Controller::for_shared_stream(
        counted_own(queues, own),
        watches.metal_stack_clusters.store(),
    )
    .watches_shared_stream(
        watches.firewalls.follow(),
        counted(queues, |f: Arc<MetalStackFirewall>| owners(&f)),
    )
    .watches_shared_stream(
        watches.clusters.follow_changes(cluster_gates),
        counted(queues, |c: Arc<Cluster>| {
            let ns = c.namespace().unwrap_or_default();
            c.metal_stack_cluster()
                .map(|name| ObjectRef::<MetalStackCluster>::new(name).within(&ns))
        }),
    )
    .watches_shared_stream(
        watches.firewall_templates.follow(),
        counted(queues, move |template: Arc<MetalStackFirewallTemplate>| {
            clusters_using_template(&template, &referencing.state())
        }),
    )
}

/// A firewall's owners of our kind, as `owns` would wake them.
fn owners(firewall: &MetalStackFirewall) -> Vec<ObjectRef<MetalStackCluster>> {
    let ns = firewall.namespace().unwrap_or_default();
    let group = format!("{}/", MetalStackCluster::group(&()));
    firewall
        .owner_references()
        .iter()
        .filter(|o| o.kind == MetalStackCluster::kind(&()) && o.api_version.starts_with(&group))
        .map(|o| ObjectRef::<MetalStackCluster>::new(&o.name).within(&ns))
        .collect()
}

/// The MetalStackClusters (of those in `clusters`) whose firewallTemplateRef names `template`.
pub fn clusters_using_template(
    template: &MetalStackFirewallTemplate,
    clusters: &[Arc<MetalStackCluster>],
) -> Vec<kube::runtime::reflector::ObjectRef<MetalStackCluster>> {
    let name = template.name_any();
    clusters
        .iter()
        .filter(|c| c.namespace() == template.namespace())
        .filter(|c| {
            c.spec
                .firewall_template_ref
                .as_ref()
                .is_some_and(|r| r.name == name)
        })
        .map(|c| kube::runtime::reflector::ObjectRef::from_obj(c.as_ref()))
        .collect()
}
