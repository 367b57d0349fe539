//! MetalStackRemediation: a MachineHealthCheck's external remediation of an unhealthy Machine,
//! carried out on its metal-stack machine (a power cycle or a reinstall), attempt after attempt
//! up to the strategy's limit, before the Machine is handed back for replacement.
//!
//! `observe` reads, `decide` chooses the next step without I/O, `act` takes it, and the engine
//! writes the status once; `watches` says what wakes a remediation.

mod act;
mod decide;
mod model;
mod observe;
#[cfg(test)]
mod tests;
pub mod watches;

use crate::api::remediation::{MetalStackRemediation, MetalStackRemediationStatus};
use crate::reconciler::{Context, Effect, Error, Reconciler, Requeue, Result, failure};
use model::{Observed, RemediationDecision, RemediationStep};

pub use decide::{FINALIZER, REMEDIATED_ANNOTATION};

/// The MetalStackRemediation controller's parts.
pub struct Remediations;

impl Reconciler for Remediations {
    type Object = MetalStackRemediation;
    type Observed = Observed;
    type Step = RemediationStep;
    type Status = MetalStackRemediationStatus;

    fn status(obj: &MetalStackRemediation) -> Option<&MetalStackRemediationStatus> {
        obj.status.as_ref()
    }

    async fn observe(obj: &MetalStackRemediation, ctx: &Context) -> Result<Observed> {
        observe::observe(obj, ctx).await
    }

    fn decide(obj: &MetalStackRemediation, observed: &Observed) -> RemediationDecision {
        decide::decide(obj, observed)
    }

    async fn act(obj: &MetalStackRemediation, ctx: &Context, step: &RemediationStep) -> Result<()> {
        act::act(obj, ctx, step).await
    }

    fn step_name(step: &RemediationStep) -> &'static str {
        step.into()
    }

    fn effect(step: &RemediationStep) -> Effect {
        match step {
            RemediationStep::Nothing => Effect::Nothing,
            RemediationStep::AddFinalizer => Effect::OwnObject,
            RemediationStep::PowerCycle(_) | RemediationStep::Reinstall(..) => Effect::MetalApi,
            RemediationStep::Conclude(_)
            | RemediationStep::Retire { .. }
            | RemediationStep::GiveUp(_) => Effect::Elsewhere,
            RemediationStep::RemoveFinalizer => Effect::LetsGo,
        }
    }

    fn failed(
        obj: &MetalStackRemediation,
        status: MetalStackRemediationStatus,
        error: Error,
        step: Option<&RemediationStep>,
    ) -> (MetalStackRemediationStatus, Result<Requeue>) {
        let attempted = matches!(
            step,
            Some(RemediationStep::PowerCycle(_) | RemediationStep::Reinstall(..))
        );
        failure::<Self>(status, error, step, |s, e| {
            decide::after_failure(obj, s, e, attempted)
        })
    }
}
