//! What a MetalStackFirewall needs next, decided from what was observed, without I/O.

use super::FINALIZER;
use super::model::{FirewallDecision, FirewallGate, FirewallStep, Observed, target};
use super::request::request;
use crate::api::{MetalStackCluster, MetalStackFirewall, MetalStackFirewallStatus};
use crate::controllers::allocation::{Found, health_condition, health_requeue, record_patch};
use crate::reconciler::conditions::{Conditions, Reason, Type};
use crate::reconciler::gates::report_pause;
use crate::reconciler::{Decision, Error, Phase, Requeue};
use metal_api::ProviderId;
use metal_api::types::{Machine, MachineHealth};
use std::time::Duration;

/// How long to wait for a MetalStackCluster that does not exist (yet).
const ABSENT: Duration = Duration::from_secs(10);

pub(crate) fn decide(fw: &MetalStackFirewall, observed: &Observed) -> FirewallDecision {
    let mut status = fw.status.clone().unwrap_or_default();
    match observed.phase() {
        Phase::Idle(next) => Decision::new(FirewallStep::Nothing, status, next),
        Phase::Teardown(owned) => {
            status.ready = false;
            Conditions::of(&mut status.conditions, fw.metadata.generation).set_false(
                Type::Ready,
                Reason::Deleting,
                "freeing the firewall machine",
            );
            match owned.first() {
                Some(id) => Decision::new(FirewallStep::Free(id.clone()), status, Requeue::Now),
                None => Decision::new(FirewallStep::RemoveFinalizer, status, Requeue::AwaitChange),
            }
        }
        Phase::Live(gate) => decide_live(fw, gate, status),
    }
}

fn decide_live(
    fw: &MetalStackFirewall,
    gate: &FirewallGate,
    mut status: MetalStackFirewallStatus,
) -> FirewallDecision {
    let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
    let inputs = match gate {
        FirewallGate::NoCluster => {
            conditions.set_false(
                Type::Ready,
                Reason::WaitingForCluster,
                "waiting for the MetalStackCluster this firewall belongs to (owner reference or cluster-name label)",
            );
            return Decision::new(FirewallStep::Nothing, status, Requeue::After(ABSENT));
        }
        FirewallGate::Paused(why) => {
            report_pause(&mut conditions, Some(why));
            return Decision::new(FirewallStep::Nothing, status, Requeue::AwaitChange);
        }
        FirewallGate::NoNetwork { cluster } => {
            report_pause(&mut conditions, None);
            let message =
                format!("waiting for MetalStackCluster {cluster} to have its private network");
            conditions.set_false(Type::Ready, Reason::WaitingForNetwork, message);
            return Decision::new(FirewallStep::Nothing, status, Requeue::Poll);
        }
        FirewallGate::Open(inputs) => {
            report_pause(&mut conditions, None);
            inputs
        }
    };
    let (msc, network, found) = (&inputs.msc, &inputs.network, &inputs.found);
    let target = target(fw, msc);
    let problem = target.as_ref().err().map(ToString::to_string);
    if let Some(problem) = problem.or_else(|| found.preset_problem()) {
        let error = Error::Invalid(problem);
        return Decision::failed(
            FirewallStep::Nothing,
            after_failure(fw, status, &error),
            error,
        );
    }
    match found {
        Found::Ours(m) => allocated(fw, msc, m, status),
        Found::Lost(lost) => {
            let message = lost.message(
                "delete this MetalStackFirewall; the MetalStackCluster that created it creates a new one",
            );
            status.ready = false;
            let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
            conditions.set_false(
                Type::FirewallAllocated,
                Reason::MachineLost,
                message.clone(),
            );
            conditions.set_false(Type::Ready, Reason::MachineLost, message);
            Decision::new(FirewallStep::Nothing, status, Requeue::Resync)
        }
        _ => {
            let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
            let message = format!("allocating a firewall of size {}", fw.spec.machine_type);
            conditions.set_false(Type::FirewallAllocated, Reason::Allocating, message.clone());
            conditions.set_false(Type::Ready, Reason::Allocating, message);
            let request = request(fw, msc, network, target.ok().and_then(|t| t.preset));
            Decision::new(
                FirewallStep::Allocate(Box::new(request)),
                status,
                Requeue::Now,
            )
        }
    }
}

/// The status of an allocated firewall. Unlike a machine, a firewall is ready only while it is
/// healthy: its cluster's FirewallReady follows it.
fn allocated(
    fw: &MetalStackFirewall,
    msc: &MetalStackCluster,
    m: &Machine,
    mut status: MetalStackFirewallStatus,
) -> FirewallDecision {
    status.machine_id = Some(m.id.clone());
    let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
    let message = format!("firewall machine {}", m.id);
    conditions.set_true(Type::FirewallAllocated, Reason::Allocated, message);
    let health = m.health();
    let (healthy, reason, message) = health_condition(&health);
    conditions.set_to(healthy, Type::FirewallHealthy, reason, message.clone());
    let ready = health == MachineHealth::Ready;
    let next = if ready {
        let message = format!("firewall {} has phoned home", m.id);
        conditions.set_true(Type::Ready, Reason::PhonedHome, message);
        Requeue::Resync
    } else {
        conditions.set_false(Type::Ready, reason, message);
        // The cluster's machines wait for this firewall: looked at sooner than a machine.
        match health_requeue(&health) {
            Requeue::Booting => Requeue::BootingGate,
            other => other,
        }
    };
    status.ready = ready;
    // Name the machine in spec.providerID, as MetalStackMachines do (a preset one is kept).
    let naming = fw.spec.provider_id.is_none().then(|| {
        serde_json::json!({
            "spec": {"providerID": ProviderId::format(&msc.spec.partition, &m.id)}
        })
    });
    let step = match record_patch(fw, FINALIZER, naming) {
        Some(patch) => FirewallStep::Record(patch),
        None => FirewallStep::Nothing,
    };
    Decision::new(step, status, next)
}

/// The status after a failed step or an unusable spec.
pub(crate) fn after_failure(
    fw: &MetalStackFirewall,
    mut status: MetalStackFirewallStatus,
    error: &Error,
) -> MetalStackFirewallStatus {
    status.ready = false;
    let reason = Reason::Failed(error.category());
    let mut conditions = Conditions::of(&mut status.conditions, fw.metadata.generation);
    conditions.set_false(Type::FirewallAllocated, reason, error.to_string());
    conditions.set_false(Type::Ready, reason, error.to_string());
    status
}
