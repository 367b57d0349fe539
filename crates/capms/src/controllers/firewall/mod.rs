//! MetalStackFirewall: a firewall machine in metal-api, ready while it is healthy.
//!
//! `observe` reads, `decide` chooses the next step without I/O, `act` takes it, and the engine
//! writes the status once; `watches` says what wakes a MetalStackFirewall.

mod act;
mod decide;
mod model;
mod observe;
mod request;
#[cfg(test)]
mod tests;
pub mod watches;

use crate::api::{MetalStackFirewall, MetalStackFirewallStatus};
use crate::reconciler::{Context, Effect, Error, Reconciler, Requeue, Result, failure};
use model::{FirewallDecision, FirewallStep, Observed};

pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/firewall";

/// The MetalStackFirewall controller's parts.
pub struct Firewalls;

impl Reconciler for Firewalls {
    type Object = MetalStackFirewall;
    type Observed = Observed;
    type Step = FirewallStep;
    type Status = MetalStackFirewallStatus;

    fn status(obj: &MetalStackFirewall) -> Option<&MetalStackFirewallStatus> {
        obj.status.as_ref()
    }

    async fn observe(obj: &MetalStackFirewall, ctx: &Context) -> Result<Observed> {
        observe::observe(obj, ctx).await
    }

    fn decide(obj: &MetalStackFirewall, observed: &Observed) -> FirewallDecision {
        decide::decide(obj, observed)
    }

    async fn act(obj: &MetalStackFirewall, ctx: &Context, step: &FirewallStep) -> Result<()> {
        act::act(obj, ctx, step).await
    }

    fn step_name(step: &FirewallStep) -> &'static str {
        step.into()
    }

    fn effect(step: &FirewallStep) -> Effect {
        step.effect()
    }

    fn failed(
        obj: &MetalStackFirewall,
        status: MetalStackFirewallStatus,
        error: Error,
        step: Option<&FirewallStep>,
    ) -> (MetalStackFirewallStatus, Result<Requeue>) {
        failure::<Self>(status, error, step, |s, e| decide::after_failure(obj, s, e))
    }
}
