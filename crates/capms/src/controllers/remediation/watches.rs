//! What wakes a MetalStackRemediation: its own changes (not its status), and what it reads of
//! its Machine (its Node's readiness, its annotations, its OwnerRemediated condition, its
//! deletion). metal-api sends no events: a running attempt looks again on a timer.

use crate::api::remediation::MetalStackRemediation;
use crate::cache::watch::{fingerprint, own_change};
use crate::capi::{Machine, OWNER_REMEDIATED};
use crate::controllers::Watches;
use crate::reconciler::Context;
use crate::reconciler::queue::{counted, counted_own};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;

/// The MetalStackRemediation controller, woken by everything above.
pub fn controller(watches: &mut Watches, ctx: &Context) -> Controller<MetalStackRemediation> {
    let queues = &ctx.metrics.queues;
    let own = watches.remediations.follow_changes(own_change);
    let remediations = watches.remediations.store();
    let of_machine = remediations.clone();
    Controller::for_shared_stream(counted_own(queues, own), remediations).watches_shared_stream(
        watches.machines.follow_changes(remediated_facts),
        counted(queues, move |m: Arc<Machine>| {
            let key = ObjectRef::<MetalStackRemediation>::new(&m.name_any())
                .within(&m.namespace().unwrap_or_default());
            // Most Machines have no remediation: they wake nothing.
            of_machine.get(&key).map(|_| key)
        }),
    )
}

/// The fingerprint of what a remediation reads of its Machine.
pub(crate) fn remediated_facts(machine: &Machine) -> u64 {
    let owner_remediated = machine
        .condition(OWNER_REMEDIATED)
        .map(|c| (c.status.clone(), c.reason.clone()));
    fingerprint(&(
        &machine.metadata.uid,
        machine.node_ready(),
        machine.metadata.deletion_timestamp.is_some(),
        machine.annotations(),
        owner_remediated,
    ))
}
