//! What wakes a MetalStackCluster: its own changes (not its status), its firewall, its
//! Cluster's gates, the firewall template and firewall deployment it names, and what changes
//! its failure domains: a machine template's size in its namespace, and a catalog refresh that
//! changes which racks have a free machine.

use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{
    MetalStackCluster, MetalStackFirewall, MetalStackFirewallTemplate, MetalStackMachineTemplate,
    clusters_using_template,
};
use crate::cache::watch::{fingerprint, own_change};
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
    // A cluster waiting for its firewall template or deployment goes on as soon as it appears.
    let referencing = watches.metal_stack_clusters.store();
    let deployments = watches.firewall_deployments.store();
    let referencing_deployment = watches.metal_stack_clusters.store();
    let in_namespace = watches.metal_stack_clusters.store();
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
            let clusters = referencing.state();
            clusters_using_template(&template, &clusters, &deployments.state())
                .into_iter()
                .map(ObjectRef::from_obj)
                .collect::<Vec<_>>()
        }),
    )
    .watches_shared_stream(
        watches.firewall_deployments.follow(),
        counted(
            queues,
            move |deployment: Arc<MetalStackFirewallDeployment>| {
                clusters_using_deployment(&deployment, &referencing_deployment.state())
            },
        ),
    )
    .watches_shared_stream(
        watches.machine_templates.follow_changes(template_size),
        counted(queues, move |template: Arc<MetalStackMachineTemplate>| {
            let ns = template.namespace();
            let clusters = in_namespace.state();
            let of_namespace = clusters.iter().filter(|c| c.namespace() == ns);
            of_namespace
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect::<Vec<_>>()
        }),
    )
    .reconcile_all_on(
        ctx.catalogs
            .own()
            .changes(super::failure_domains::free_racks),
    )
}

/// What a cluster's failure domains read of a machine template: its size.
fn template_size(template: &MetalStackMachineTemplate) -> u64 {
    fingerprint(&(
        &template.metadata.uid,
        &template.spec.template.spec.machine_type,
    ))
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

/// The MetalStackClusters (of those in `clusters`) whose firewallDeploymentRef names
/// `deployment`.
fn clusters_using_deployment(
    deployment: &MetalStackFirewallDeployment,
    clusters: &[Arc<MetalStackCluster>],
) -> Vec<ObjectRef<MetalStackCluster>> {
    let name = deployment.name_any();
    clusters
        .iter()
        .filter(|c| c.namespace() == deployment.namespace())
        .filter(|c| {
            c.spec
                .firewall_deployment_ref
                .as_ref()
                .is_some_and(|r| r.name == name)
        })
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}
