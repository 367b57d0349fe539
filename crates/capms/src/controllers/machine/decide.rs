//! What a MetalStackMachine needs next, decided from what was observed, without I/O.

use super::FINALIZER;
use super::model::{
    Live, MachineDecision, MachineGate, MachineInputs, MachineStep, Observed, cluster_name,
    partition,
};
use super::order::Order;
use super::placement::{self, Placed};
use super::{ASN_LABEL, RACK_LABEL};
use crate::api::{
    Initialization, MachineAddress, MachineAddressType, MetalStackMachine, MetalStackMachineStatus,
};
use crate::capi::Machine as CapiMachine;
use crate::controllers::allocation::{self, Found, Lost, Target, health_condition, health_requeue};
use crate::reconciler::clock::age;
use crate::reconciler::conditions::{self, Conditions, Reason, Type};
use crate::reconciler::gates::report_pause;
use crate::reconciler::handoffs::{HANDOFF_TIMEOUT, Handoff};
use crate::reconciler::{Decision, Error, Phase, Requeue};
use kube::ResourceExt;
use metal_api::ProviderId;
use metal_api::types::{Machine, MachineHealth, machine_network_type};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long to wait for an object that sends no event here (the Machine, the Cluster).
const ABSENT: Duration = Duration::from_secs(10);
/// MachineHealthy while the machine provisions.
const PROVISIONING: &str = "provisioning (metal-api's machine events show how far)";
/// How long a new object waits at a gate before its status says so.
pub(crate) const UNREPORTED_WAIT: Duration = Duration::from_secs(20);
pub(crate) fn decide(msm: &MetalStackMachine, observed: &Observed) -> MachineDecision {
    let mut status = msm.status.clone().unwrap_or_default();
    match observed.phase() {
        Phase::Idle(next) => Decision::new(MachineStep::Nothing, status, next),
        Phase::Teardown(owned) => {
            status.ready = false;
            status.initialization = None;
            Conditions::of(&mut status.conditions, msm.metadata.generation).set_false(
                Type::Ready,
                Reason::Deleting,
                "freeing the machine",
            );
            match owned.first() {
                Some(id) => Decision::new(MachineStep::Free(id.clone()), status, Requeue::Now),
                None => Decision::new(MachineStep::RemoveFinalizer, status, Requeue::AwaitChange),
            }
        }
        Phase::Live(live) => decide_live(msm, live, status),
    }
}

fn decide_live(
    msm: &MetalStackMachine,
    live: &Live,
    mut status: MetalStackMachineStatus,
) -> MachineDecision {
    let nothing = |status, next| Decision::new(MachineStep::Nothing, status, next);
    let mut conditions = Conditions::of(&mut status.conditions, msm.metadata.generation);
    let (machine, reason, next) = match &live.gate {
        // Cluster API's contract: until the owning Machine is there, capms writes nothing to
        // the object (a write racing Cluster API's first patch of a new object makes that
        // patch fail, and its MachineSet gives the Machine up, leaving the object orphaned).
        MachineGate::NoOwner => return nothing(status, Requeue::AwaitChange),
        MachineGate::NoMachine => return nothing(status, Requeue::After(ABSENT)),
        MachineGate::Paused(why) => {
            report_pause(&mut conditions, Some(why));
            return nothing(status, Requeue::AwaitChange);
        }
        MachineGate::HeldByMachineSet { left } => return nothing(status, Requeue::After(*left)),
        MachineGate::NoCluster { machine } => {
            (machine, Reason::WaitingForCluster, Requeue::After(ABSENT))
        }
        MachineGate::NoInfrastructure { machine } => {
            report_pause(&mut conditions, None);
            (
                machine,
                Reason::WaitingForClusterInfrastructure,
                Requeue::Poll,
            )
        }
        MachineGate::NoBootstrapSecret { machine } => {
            report_pause(&mut conditions, None);
            (machine, Reason::WaitingForBootstrapData, Requeue::Poll)
        }
        MachineGate::Open(open) => {
            report_pause(&mut conditions, None);
            let decision = allocate(msm, open, status);
            return match open.held {
                Some(left) => while_held(msm, decision, left),
                None => decision,
            };
        }
    };
    let before = msm.status.clone().unwrap_or_default();
    if unreported_wait(msm, live.now, &before) {
        return nothing(before, next);
    }
    let message = waiting_message(msm, machine, reason);
    conditions.set_false(Type::Ready, reason, message);
    nothing(status, next)
}

/// What a replica still held by its MachineSet does of `decision`: it allocates, which writes
/// only to metal-api, so that its machine installs while Cluster API creates the other
/// replicas; everything else (naming the machine, a status) waits, unwritten, until the
/// MachineSet has created them all or `left` is over. Each write to the object would wake
/// Cluster API's Machine controller, whose requests share one client rate limit with the
/// MachineSet's creations. What capms allocated for an object deleted meanwhile, before capms
/// wrote its finalizer, is freed as soon as capms sees the deletion (`left_behind`), or else by
/// the orphan sweep.
fn while_held(
    msm: &MetalStackMachine,
    decision: MachineDecision,
    left: Duration,
) -> MachineDecision {
    let unwritten = msm.status.clone().unwrap_or_default();
    match decision.step {
        MachineStep::Allocate(request) => {
            Decision::new(MachineStep::Allocate(request), unwritten, Requeue::Now)
        }
        _ => Decision::new(MachineStep::Nothing, unwritten, Requeue::After(left)),
    }
}

/// Why a live object waits at a closed gate, for its Ready condition.
fn waiting_message(msm: &MetalStackMachine, machine: &CapiMachine, reason: Reason) -> String {
    let ns = msm.namespace().unwrap_or_default();
    let cluster_name = cluster_name(msm, machine);
    match reason {
        Reason::WaitingForCluster => format!("Cluster {ns}/{cluster_name} does not exist (yet)"),
        Reason::WaitingForClusterInfrastructure => {
            format!("waiting for the MetalStackCluster of Cluster {cluster_name} to be provisioned")
        }
        _ => format!(
            "waiting for Machine {} to have spec.bootstrap.dataSecretName",
            machine.name_any()
        ),
    }
}

/// Every gate is open: the machine allocated for the object, or the request that allocates
/// one.
fn allocate(
    msm: &MetalStackMachine,
    open: &MachineInputs,
    mut status: MetalStackMachineStatus,
) -> MachineDecision {
    let partition = partition(msm, &open.msc);
    let target = Target::of(msm.spec.provider_id.as_deref(), &partition, None);
    let problem = target.as_ref().err().map(ToString::to_string);
    if let Some(problem) = problem.or_else(|| open.found.preset_problem()) {
        let error = Error::Invalid(problem);
        return Decision::failed(
            MachineStep::Nothing,
            after_failure(msm, status, &error),
            error,
        );
    }
    match &open.found {
        Found::Ours(_) if open.handoff == Handoff::Waiting => return awaiting_handoff(msm),
        Found::Ours(m) => return allocated(msm, m, &partition, status),
        Found::Lost(lost) => return lost_machine(msm, lost, status),
        _ => {}
    }
    if being_deleted(&open.machine) {
        return Decision::new(MachineStep::Nothing, status, Requeue::AwaitChange);
    }
    let Some(user_data) = &open.user_data else {
        return without_bootstrap_data(msm, &open.machine, status);
    };
    let preset = match placement::placed(msm, open, &partition) {
        Placed::Anywhere => target.ok().and_then(|t| t.preset),
        Placed::Machine(id) => Some(id),
        Placed::Waits { reason, message } => {
            Conditions::of(&mut status.conditions, msm.metadata.generation).set_false(
                Type::Ready,
                reason,
                message,
            );
            return Decision::new(MachineStep::Nothing, status, Requeue::Poll);
        }
    };
    let request = Order {
        msm,
        msc: &open.msc,
        partition: &partition,
        network: open.network.clone(),
        user_data,
        control_plane: open.machine.is_control_plane(),
        preset,
    }
    .request();
    // No "allocating" condition: allocating is one call, the next reconcile at once writes its
    // outcome (the machine, or why there is none), and a failure names itself.
    Decision::new(
        MachineStep::Allocate(Box::new(request)),
        status,
        Requeue::Now,
    )
}

/// A machine that has phoned home, beyond the handoff window: the object stays as it is,
/// unwritten (a write would wake Cluster API's Machine controller, which is what the window
/// spares), until Cluster API takes up an earlier machine (which wakes it) or the window's
/// timeout.
fn awaiting_handoff(msm: &MetalStackMachine) -> MachineDecision {
    let unwritten = msm.status.clone().unwrap_or_default();
    Decision::new(
        MachineStep::Nothing,
        unwritten,
        Requeue::After(HANDOFF_TIMEOUT),
    )
}

/// Is the Machine being deleted? Cluster API deletes its infrastructure next, so capms neither
/// takes the object up nor allocates for it. At 1,000 machines, capms allocated for a replica
/// whose deletion Cluster API had begun 1.6 s before (its MachineSet had made one too many), and
/// that machine was left allocated. What is allocated already stays reported.
fn being_deleted(machine: &CapiMachine) -> bool {
    machine.metadata.deletion_timestamp.is_some()
}

/// Nothing to allocate with: the Machine's bootstrap Secret (read only to allocate) is missing
/// or has no `value`.
fn without_bootstrap_data(
    msm: &MetalStackMachine,
    machine: &CapiMachine,
    mut status: MetalStackMachineStatus,
) -> MachineDecision {
    let ns = msm.namespace().unwrap_or_default();
    let secret = machine
        .spec
        .bootstrap
        .data_secret_name
        .as_deref()
        .unwrap_or_default();
    let message = format!("bootstrap Secret {ns}/{secret} does not exist or has no key \"value\"");
    Conditions::of(&mut status.conditions, msm.metadata.generation).set_false(
        Type::Ready,
        Reason::WaitingForBootstrapData,
        message,
    );
    Decision::new(MachineStep::Nothing, status, Requeue::Poll)
}

/// Does a new object's wait at a gate go unwritten? A wait a new object meets only for moments
/// (its cluster provisions as Cluster API creates its machines) is not written: each write
/// wakes Cluster API's Machine controller, and nobody would see it. Once the object is
/// [`UNREPORTED_WAIT`] old, or has a Ready condition, every wait is written; the gate's own
/// requeue brings that look.
fn unreported_wait(
    msm: &MetalStackMachine,
    now: jiff::Timestamp,
    before: &MetalStackMachineStatus,
) -> bool {
    let reported = conditions::find(&before.conditions, Type::Ready).is_some();
    !reported && age(msm, now).is_some_and(|age| age < UNREPORTED_WAIT)
}

/// An allocated machine: its addresses, health and readiness, and the patch that names it in
/// the object when that is not there yet.
fn allocated(
    msm: &MetalStackMachine,
    m: &Machine,
    partition: &str,
    mut status: MetalStackMachineStatus,
) -> MachineDecision {
    let mut conditions = Conditions::of(&mut status.conditions, msm.metadata.generation);
    let message = format!("machine {} in partition {partition}", m.id);
    conditions.set_true(Type::MachineAllocated, Reason::Allocated, message);
    let health = m.health();
    let (healthy, reason, message) = match &health {
        // Not the last event: each would be a status write waking Cluster API's Machine
        // controller; the condition's lastTransitionTime tells since when, metal-api the rest.
        MachineHealth::Provisioning(_) => (true, Reason::Provisioning, PROVISIONING.to_owned()),
        _ => health_condition(&health),
    };
    conditions.set_to(healthy, Type::MachineHealthy, reason, message.clone());
    // Ready only once the object names its machine: Cluster API takes a provisioned machine's
    // spec.providerID. Until then this status is written only if naming it failed (a conflict
    // on a busy object), and then it must not say ready.
    let named = msm.spec.provider_id.is_some();
    let next = if health == MachineHealth::Ready && !named {
        let message = format!(
            "machine {} has phoned home; naming it in spec.providerID",
            m.id
        );
        conditions.set_false(Type::Ready, Reason::Provisioning, message);
        Requeue::Now
    } else if health == MachineHealth::Ready {
        let message = format!("machine {} has phoned home", m.id);
        conditions.set_true(Type::Ready, Reason::PhonedHome, message);
        status.ready = true;
        status.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        Requeue::Resync
    } else {
        // Each status change wakes Cluster API's Machine controller, which copies Ready into
        // its Machine: while the machine provisions, the status stays put.
        let message = match &health {
            MachineHealth::Provisioning(_) => format!("machine {} is provisioning", m.id),
            _ => message,
        };
        conditions.set_false(Type::Ready, reason, message);
        // Cluster API's contract: once provisioned, a machine stays provisioned; its health
        // shows in the conditions (a firewall, by contrast, is ready only while healthy).
        if !status.ready {
            status.initialization = None;
        }
        health_requeue(&health)
    };
    status.addresses = addresses_of(m);
    status.failure_domain = (!m.rackid.is_empty()).then(|| m.rackid.clone());
    // The machine is named first: naming it changes the spec, and so the generation every
    // condition observes. The reconcile right after it writes the status (the engine skips
    // this one's, as moot), unless naming it fails: then this status shows the allocation.
    match allocation::record_patch(msm, FINALIZER, naming_patch(msm, m, partition)) {
        Some(patch) => Decision::new(MachineStep::Record(patch), status, Requeue::Now),
        None => Decision::new(MachineStep::Nothing, status, next),
    }
}

/// A machine lost outside capms is reported, never replaced: the Node could not match a new
/// machine, as spec.providerID is immutable. Deleting the Machine has Cluster API replace it.
fn lost_machine(
    msm: &MetalStackMachine,
    lost: &Lost,
    mut status: MetalStackMachineStatus,
) -> MachineDecision {
    let message = lost.message(
        "delete its Machine, and Cluster API replaces it (through its MachineSet) with a newly allocated machine",
    );
    let mut conditions = Conditions::of(&mut status.conditions, msm.metadata.generation);
    conditions.set_false(Type::MachineAllocated, Reason::MachineLost, message.clone());
    conditions.set_false(Type::Ready, Reason::MachineLost, message.clone());
    // v1beta1 consumers read these; v1beta2 reads the conditions.
    status.failure_reason = Some(FAILURE_REASON_LOST.into());
    status.failure_message = Some(message);
    Decision::new(MachineStep::Nothing, status, Requeue::Resync)
}

/// Cluster API's v1beta1 MachineStatusError for a machine that changed under its feet.
pub(crate) const FAILURE_REASON_LOST: &str = "UpdateError";

/// The status after a failed step or an unusable spec: the allocation condition and Ready
/// carry the reason. A provisioned machine stays provisioned.
pub(crate) fn after_failure(
    msm: &MetalStackMachine,
    mut status: MetalStackMachineStatus,
    error: &Error,
) -> MetalStackMachineStatus {
    let reason = Reason::Failed(error.category());
    let mut conditions = Conditions::of(&mut status.conditions, msm.metadata.generation);
    conditions.set_false(Type::MachineAllocated, reason, error.to_string());
    conditions.set_false(Type::Ready, reason, error.to_string());
    if !status.ready {
        status.initialization = None;
    }
    status
}

/// The merge patch naming machine `m` in the object: spec.providerID (unless the user preset
/// one, which is kept as written) and the rack and ASN labels; None when the object names it
/// already.
fn naming_patch(
    msm: &MetalStackMachine,
    m: &Machine,
    partition: &str,
) -> Option<serde_json::Value> {
    let mut labels = BTreeMap::new();
    if !m.rackid.is_empty() {
        labels.insert(RACK_LABEL.to_owned(), m.rackid.clone());
    }
    if let Some(asn) = m
        .allocation
        .as_ref()
        .and_then(|a| a.networks.first())
        .map(|n| n.asn)
    {
        labels.insert(ASN_LABEL.to_owned(), asn.to_string());
    }
    let labels_current = labels.iter().all(|(k, v)| msm.labels().get(k) == Some(v));
    if labels_current && msm.spec.provider_id.is_some() {
        return None;
    }
    let provider_id = msm
        .spec
        .provider_id
        .clone()
        .unwrap_or_else(|| ProviderId::format(partition, &m.id));
    Some(serde_json::json!({"metadata": {"labels": labels}, "spec": {"providerID": provider_id}}))
}

/// Addresses as Cluster API shows them: InternalIP from the private networks, ExternalIP from
/// external ones, the hostname as Hostname and InternalDNS.
pub(crate) fn addresses_of(m: &Machine) -> Vec<MachineAddress> {
    let Some(a) = &m.allocation else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut push = |type_, address: &str| {
        out.push(MachineAddress {
            type_,
            address: address.to_owned(),
        })
    };
    let mut private: Vec<_> = a
        .networks
        .iter()
        .filter(|n| n.networktype.starts_with("private"))
        .collect();
    private.sort_by_key(|n| {
        n.networktype != machine_network_type::PRIVATE_PRIMARY_UNSHARED
            && n.networktype != machine_network_type::PRIVATE_PRIMARY_SHARED
    });
    for n in private {
        n.ips
            .iter()
            .for_each(|ip| push(MachineAddressType::InternalIp, ip));
    }
    for n in a
        .networks
        .iter()
        .filter(|n| n.networktype == machine_network_type::EXTERNAL)
    {
        n.ips
            .iter()
            .for_each(|ip| push(MachineAddressType::ExternalIp, ip));
    }
    if !a.hostname.is_empty() {
        push(MachineAddressType::Hostname, &a.hostname);
        push(MachineAddressType::InternalDns, &a.hostname);
    }
    out
}
