//! What wakes a MetalStackMachineTemplate: its own changes (not its status), and a catalog
//! refresh that changed metal-api's sizes or images.

use crate::api::MetalStackMachineTemplate;
use crate::cache::watch::own_change;
use crate::controllers::Watches;
use crate::reconciler::Context;
use crate::reconciler::queue::counted_own;
use kube::runtime::Controller;

/// The MetalStackMachineTemplate controller, woken by everything above.
pub(crate) fn controller(
    watches: &mut Watches,
    ctx: &Context,
) -> Controller<MetalStackMachineTemplate> {
    let own = watches.machine_templates.follow_changes(own_change);
    Controller::for_shared_stream(
        counted_own(&ctx.metrics.queues, own),
        watches.machine_templates.store(),
    )
    .reconcile_all_on(
        ctx.catalogs
            .own()
            .changes(|c| (c.sizes.clone(), c.images.clone())),
    )
}
