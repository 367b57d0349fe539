//! What wakes a MetalStackFirewallDeployment: its own changes (not its status) and the firewall
//! made for it (labelled with its name).

use crate::api::MetalStackFirewall;
use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::cache::watch::own_change;
use crate::controllers::Watches;
use crate::ownership::FIREWALL_DEPLOYMENT_LABEL;
use crate::reconciler::Context;
use crate::reconciler::queue::{counted, counted_own};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;

/// The MetalStackFirewallDeployment controller, woken by everything above.
pub fn controller(
    watches: &mut Watches,
    ctx: &Context,
) -> Controller<MetalStackFirewallDeployment> {
    let queues = &ctx.metrics.queues;
    let own = watches.firewall_deployments.follow_changes(own_change);
    Controller::for_shared_stream(
        counted_own(queues, own),
        watches.firewall_deployments.store(),
    )
    .watches_shared_stream(
        watches.firewalls.follow(),
        counted(queues, |fw: Arc<MetalStackFirewall>| deployment_of(&fw)),
    )
}

/// The deployment a firewall was made for, by its label.
fn deployment_of(fw: &MetalStackFirewall) -> Option<ObjectRef<MetalStackFirewallDeployment>> {
    let name = fw.labels().get(FIREWALL_DEPLOYMENT_LABEL)?;
    Some(ObjectRef::new(name).within(&fw.namespace().unwrap_or_default()))
}
