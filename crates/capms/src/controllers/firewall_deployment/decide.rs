//! A firewall deployment's status, from its firewall, without I/O; and on deletion, whether it
//! may go.

use super::{DeploymentDecision, DeploymentStep, FINALIZER, Observed, Seen};
use crate::api::Initialization;
use crate::api::v1alpha1::{FirewallDeploymentStatus, MetalStackFirewallDeployment};
use crate::reconciler::conditions::{Conditions, Reason, Type};
use crate::reconciler::{Decision, Phase, Requeue};
use kube::ResourceExt;
use std::time::Duration;

/// How often a deleted deployment looks for its firewall to be gone (its deletion wakes it
/// too).
const FIREWALL_GONE_RECHECK: Duration = Duration::from_secs(5);

pub(crate) fn decide(
    fwd: &MetalStackFirewallDeployment,
    observed: &Observed,
) -> DeploymentDecision {
    let status = fwd.status.clone().unwrap_or_default();
    match observed.phase() {
        Phase::Idle(next) => Decision::new(DeploymentStep::Nothing, status, next),
        Phase::Teardown(seen) => teardown(fwd, seen, status),
        Phase::Live(seen) => live(fwd, seen, status),
    }
}

fn live(
    fwd: &MetalStackFirewallDeployment,
    seen: &Seen,
    mut status: FirewallDeploymentStatus,
) -> DeploymentDecision {
    let ready = seen
        .firewall
        .as_ref()
        .is_some_and(|fw| fw.status.as_ref().is_some_and(|s| s.ready));
    let allocated = seen
        .firewall
        .as_ref()
        .is_some_and(|fw| fw.spec.provider_id.is_some());
    status.ready = ready;
    status.initialization = allocated.then_some(Initialization {
        provisioned: Some(true),
    });
    let mut conditions = Conditions::of(&mut status.conditions, fwd.metadata.generation);
    match &seen.firewall {
        None => conditions.set_false(
            Type::Ready,
            Reason::WaitingForFirewall,
            format!(
                "no MetalStackFirewall is made for this deployment yet: a MetalStackCluster names it in spec.firewallDeploymentRef, and its firewall is created from MetalStackFirewallTemplate {}",
                fwd.spec.firewall_template_ref.name
            ),
        ),
        Some(fw) if ready => {
            let notice = match fwd.spec.auto_update.as_ref().and_then(|a| a.machine_image) {
                Some(true) => "; spec.autoUpdate.machineImage: capms rolls the firewall to the newest firewall image of its operating system and minor version",
                _ => "",
            };
            conditions.set_true(
                Type::Ready,
                Reason::FirewallReady,
                format!("MetalStackFirewall {} is ready{notice}", fw.name_any()),
            )
        }
        Some(fw) => conditions.set_false(
            Type::Ready,
            Reason::WaitingForFirewall,
            format!("waiting for MetalStackFirewall {} to become ready", fw.name_any()),
        ),
    }
    // The firewall's changes wake the deployment.
    Decision::new(DeploymentStep::Nothing, status, Requeue::AwaitChange)
}

fn teardown(
    fwd: &MetalStackFirewallDeployment,
    seen: &Seen,
    mut status: FirewallDeploymentStatus,
) -> DeploymentDecision {
    status.ready = false;
    let Some(fw) = &seen.firewall else {
        return Decision::new(
            DeploymentStep::RemoveFinalizer,
            status,
            Requeue::AwaitChange,
        );
    };
    let mut conditions = Conditions::of(&mut status.conditions, fwd.metadata.generation);
    conditions.set_false(
        Type::Ready,
        Reason::WaitingForFirewall,
        format!(
            "deleting: waiting for MetalStackFirewall {} to go before removing {FINALIZER}",
            fw.name_any()
        ),
    );
    Decision::new(
        DeploymentStep::Nothing,
        status,
        Requeue::After(FIREWALL_GONE_RECHECK),
    )
}
