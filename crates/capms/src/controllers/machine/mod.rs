//! MetalStackMachine: a metal-stack machine with the bootstrap data of its Machine.
//!
//! `observe` reads, `decide` chooses the next step without I/O, `act` takes it, and the engine
//! writes the status once; `watches` says what wakes a MetalStackMachine.

mod act;
mod decide;
pub(crate) mod left_behind;
mod model;
mod observe;
mod order;
mod placement;
#[cfg(test)]
mod tests;
pub mod watches;

use crate::api::{MetalStackMachine, MetalStackMachineStatus};
use crate::reconciler::{Context, Effect, Error, Reconciler, Requeue, Result, failure};
use model::{MachineDecision, MachineStep, Observed};

pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/machine";
/// Labels capms puts on a MetalStackMachine once it has a machine: where it stands.
pub const RACK_LABEL: &str = "machine.metal-stack.io/rack";
pub(crate) const ASN_LABEL: &str = "machine.metal-stack.io/network.primary.asn";
/// Tag of a machine's role in its cluster (`control-plane` or `worker`).
pub(crate) const PURPOSE: &str = "metal-stack.infrastructure.cluster.x-k8s.io/purpose";

/// The MetalStackMachine controller's parts.
pub struct Machines;

impl Reconciler for Machines {
    type Object = MetalStackMachine;
    type Observed = Observed;
    type Step = MachineStep;
    type Status = MetalStackMachineStatus;

    fn status(obj: &MetalStackMachine) -> Option<&MetalStackMachineStatus> {
        obj.status.as_ref()
    }

    async fn observe(obj: &MetalStackMachine, ctx: &Context) -> Result<Observed> {
        observe::observe(obj, ctx).await
    }

    fn decide(obj: &MetalStackMachine, observed: &Observed) -> MachineDecision {
        decide::decide(obj, observed)
    }

    async fn act(obj: &MetalStackMachine, ctx: &Context, step: &MachineStep) -> Result<()> {
        act::act(obj, ctx, step).await
    }

    fn step_name(step: &MachineStep) -> &'static str {
        step.into()
    }

    fn effect(step: &MachineStep) -> Effect {
        step.effect()
    }

    fn failed(
        obj: &MetalStackMachine,
        status: MetalStackMachineStatus,
        error: Error,
        step: Option<&MachineStep>,
    ) -> (MetalStackMachineStatus, Result<Requeue>) {
        failure::<Self>(status, error, step, |s, e| decide::after_failure(obj, s, e))
    }
}
