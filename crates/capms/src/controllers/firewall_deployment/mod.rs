//! MetalStackFirewallDeployment, the Go provider's kind: capms makes the firewall of the
//! cluster that names it (the MetalStackCluster controller does); this controller reports that
//! firewall in the deployment's status, as the Go provider's users read it (`ready`,
//! `initialization.provisioned`, a Ready condition), and lets a deleted deployment go once its
//! firewall is gone.
//!
//! `observe` reads, `decide` chooses without I/O, `act` removes the finalizer, and the engine
//! writes the status once; `watches` says what wakes a deployment.

mod decide;
mod observe;
#[cfg(test)]
mod tests;
pub mod watches;

use crate::api::v1alpha1::{FirewallDeploymentStatus, MetalStackFirewallDeployment};
use crate::reconciler::writes::remove_finalizer;
use crate::reconciler::{Context, Decision, Effect, Error, Reconciler, Requeue, Result, failure};
use kube::ResourceExt;

/// The Go provider's finalizer on its firewall deployments; capms keeps it until the firewall
/// made for the deployment is gone.
pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/firewall-deployment";

/// What observe read: the MetalStackFirewall made for the deployment, if any.
pub type Observed = crate::reconciler::Observed<Seen, Seen>;

/// The firewall made for the deployment (labelled with its name), if it exists.
#[derive(Debug, Default)]
pub struct Seen {
    pub firewall: Option<crate::api::MetalStackFirewall>,
}

#[derive(Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantNames)]
pub enum DeploymentStep {
    Nothing,
    RemoveFinalizer,
}

pub(crate) type DeploymentDecision = Decision<DeploymentStep, FirewallDeploymentStatus>;

/// The MetalStackFirewallDeployment controller's parts.
pub(crate) struct FirewallDeployments;

impl Reconciler for FirewallDeployments {
    type Object = MetalStackFirewallDeployment;
    type Observed = Observed;
    type Step = DeploymentStep;
    type Status = FirewallDeploymentStatus;

    fn status(obj: &MetalStackFirewallDeployment) -> Option<&FirewallDeploymentStatus> {
        obj.status.as_ref()
    }

    async fn observe(obj: &MetalStackFirewallDeployment, ctx: &Context) -> Result<Observed> {
        observe::observe(obj, ctx).await
    }

    fn decide(obj: &MetalStackFirewallDeployment, observed: &Observed) -> DeploymentDecision {
        decide::decide(obj, observed)
    }

    async fn act(
        obj: &MetalStackFirewallDeployment,
        ctx: &Context,
        step: &DeploymentStep,
    ) -> Result<()> {
        if *step == DeploymentStep::RemoveFinalizer {
            let api = ctx.api::<MetalStackFirewallDeployment>(&obj.namespace().unwrap_or_default());
            remove_finalizer(&api, obj, FINALIZER).await?;
        }
        Ok(())
    }

    fn step_name(step: &DeploymentStep) -> &'static str {
        step.into()
    }

    fn effect(step: &DeploymentStep) -> Effect {
        match step {
            DeploymentStep::Nothing => Effect::Nothing,
            DeploymentStep::RemoveFinalizer => Effect::LetsGo,
        }
    }

    fn failed(
        _: &MetalStackFirewallDeployment,
        status: FirewallDeploymentStatus,
        error: Error,
        step: Option<&DeploymentStep>,
    ) -> (FirewallDeploymentStatus, Result<Requeue>) {
        failure::<Self>(status, error, step, |s, _| s)
    }
}
