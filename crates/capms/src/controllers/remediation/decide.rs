//! The MetalStackRemediation decision: a pure function of what observe read.
//!
//! An attempt takes two reconciles. The first only records it in the status (its number, its
//! start and the newest reboot metal-api showed then); the second asks metal-api for the power
//! cycle or reinstall, unless metal-api already shows a newer `Planned Reboot`: then capms was
//! stopped after asking and before recording the answer, and it records it instead of asking
//! twice.

use super::model::{Live, Observed, RemediationDecision, RemediationStep};
use crate::api::remediation::{
    ExhaustionPolicy, MetalStackRemediation, MetalStackRemediationStatus, PowerActionRecord,
    RemediationPhase, RemediationType,
};
use crate::capi::{NODE_READY, OWNER_REMEDIATED, REMEDIATE_MACHINE_ANNOTATION};
use crate::ownership::retired_annotation;
use crate::reconciler::conditions::{Conditions, Reason, Type};
use crate::reconciler::{Decision, Error, Phase, Requeue, writes::has_finalizer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::ResourceExt;
use serde_json::json;
use std::time::Duration;

/// The annotation on a Machine saying when its last successful remediation began (for the
/// strategy's cooldown).
pub const REMEDIATED_ANNOTATION: &str = "metal-stack.infrastructure.cluster.x-k8s.io/remediated";
/// The finalizer capms keeps on a remediation until it wound the Machine's attempts up.
pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/remediation";
/// The reason capms gives a Machine it hands back for replacement.
pub(crate) const GIVEN_UP_REASON: &str = "RemediationFailed";
/// How much capms's clock and the apiserver's may differ (a Machine's cooldown annotation).
const CLOCK_SKEW: Duration = Duration::from_secs(30);
/// How often a running attempt looks at metal-api (which sends no events) at most.
const ATTEMPT_POLL: Duration = Duration::from_secs(10);

pub(crate) fn decide(msr: &MetalStackRemediation, observed: &Observed) -> RemediationDecision {
    let current = msr.status.clone().unwrap_or_default();
    match observed.phase() {
        Phase::Idle(next) => Decision::new(RemediationStep::Nothing, current, next),
        Phase::Teardown(live) => teardown(live, current),
        Phase::Live(live) => live_decision(msr, live, current),
    }
}

/// Deleted (by the MachineHealthCheck once the Machine is healthy, or with the Machine): the
/// Machine's attempts are wound up, then capms lets go.
fn teardown(live: &Live, status: MetalStackRemediationStatus) -> RemediationDecision {
    let step = match conclusion(live, &status) {
        Some(patch) => RemediationStep::Conclude(patch),
        None => RemediationStep::RemoveFinalizer,
    };
    Decision::new(step, status, Requeue::AwaitChange)
}

/// The patch that winds up a Machine's attempts (clears its remediate-machine annotation, notes
/// the success), unless there is nothing to wind up or it is done.
fn conclusion(live: &Live, status: &MetalStackRemediationStatus) -> Option<serde_json::Value> {
    let machine = live.machine.as_ref()?;
    let began = status.last_remediated.as_ref()?;
    let given_up = status.phase == Some(RemediationPhase::Exhausted);
    if given_up || machine.metadata.deletion_timestamp.is_some() || status.retry_count == 0 {
        return None;
    }
    let began = began.0.to_string();
    let annotations = machine.annotations();
    let done = !annotations.contains_key(REMEDIATE_MACHINE_ANNOTATION)
        && annotations.get(REMEDIATED_ANNOTATION) == Some(&began);
    let patch = json!({"metadata": {"annotations": {
        REMEDIATE_MACHINE_ANNOTATION: null,
        REMEDIATED_ANNOTATION: began,
    }}});
    (!done).then_some(patch)
}

fn live_decision(
    msr: &MetalStackRemediation,
    live: &Live,
    mut status: MetalStackRemediationStatus,
) -> RemediationDecision {
    if !has_finalizer(msr, FINALIZER) {
        return Decision::new(RemediationStep::AddFinalizer, status, Requeue::AwaitChange);
    }
    match status.phase {
        Some(RemediationPhase::Exhausted) => return given_up(msr, live, status),
        Some(RemediationPhase::Succeeded) => return after_success(msr, live, status),
        _ => {}
    }
    let generation = msr.metadata.generation;
    let machine = match found(msr, live) {
        Ok(machine) => machine,
        Err((reason, message, next)) => {
            waiting(&mut status, generation, reason, message);
            return Decision::new(RemediationStep::Nothing, status, next);
        }
    };
    status.machine_id = Some(machine.id.clone());
    let strategy = msr.spec.strategy();
    if status.retry_count == 0 {
        if let Some(since) = recently_remediated(live, strategy.cooldown()) {
            let note = format!(
                "the Machine was remediated successfully {since} ago, within the cooldown of {}s: handed back for replacement",
                strategy.cooldown().as_secs()
            );
            return give_up(msr, live, status, Reason::RemediatedRecently, note);
        }
        if strategy.kind() == RemediationType::Reinstall && !machine.reinstallable {
            let note = "the strategy reinstalls, and metal-stack's API v2 (metal-apiserver), which this cluster's credentials reach, has no reinstall: handed back for replacement, which installs a new machine".to_owned();
            return give_up(msr, live, status, Reason::ReinstallUnavailable, note);
        }
        if let Some(why) = control_plane_busy(live) {
            waiting(&mut status, generation, Reason::WaitingForControlPlane, why);
            return Decision::new(
                RemediationStep::Nothing,
                status,
                Requeue::After(ATTEMPT_POLL),
            );
        }
        return begin_attempt(status, generation, live.now, strategy.kind(), machine);
    }
    attempt(msr, live, machine, status)
}

/// The metal-stack machine of the remediation's Machine, or why there is none to remediate
/// (the reason, the message and when to look again).
fn found<'a>(
    msr: &MetalStackRemediation,
    live: &'a Live,
) -> Result<&'a super::model::MetalFacts, (Reason, String, Requeue)> {
    let ns = msr.namespace().unwrap_or_default();
    let name = msr.name_any();
    let Some(machine) = &live.machine else {
        let note = format!("Machine {ns}/{name} does not exist; nothing to remediate");
        return Err((Reason::WaitingForMachine, note, Requeue::AwaitChange));
    };
    let Some(infrastructure) = machine.metal_stack_machine() else {
        let note = format!(
            "Machine {ns}/{name}'s infrastructure is not a MetalStackMachine: capms remediates only its own machines and leaves this one alone"
        );
        return Err((Reason::NotMetalStack, note, Requeue::AwaitChange));
    };
    if live.infrastructure.is_none() {
        let note = format!("MetalStackMachine {ns}/{infrastructure} does not exist");
        return Err((Reason::WaitingForMachine, note, Requeue::AwaitChange));
    }
    live.metal.as_ref().ok_or_else(|| {
        let note = format!(
            "MetalStackMachine {ns}/{infrastructure} has no metal-stack machine that metal-api knows (no providerID yet, or the machine is gone); nothing is done"
        );
        (Reason::WaitingForMachine, note, Requeue::Poll)
    })
}

/// How long ago the Machine was last remediated successfully, if within `cooldown`.
fn recently_remediated(live: &Live, cooldown: Duration) -> Option<String> {
    let machine = live.machine.as_ref()?;
    let noted = machine.annotations().get(REMEDIATED_ANNOTATION)?;
    let at: jiff::Timestamp = noted.parse().ok()?;
    let since = crate::reconciler::clock::elapsed(at, live.now, CLOCK_SKEW)?;
    (since < cooldown).then(|| format!("{}s", since.as_secs()))
}

/// Why a control-plane Machine cannot be remediated now, as KubeadmControlPlane's own rules
/// have it: not while the control plane rolls out, while another of its machines is being
/// remediated, or while its other machines are short of a quorum.
fn control_plane_busy(live: &Live) -> Option<String> {
    let facts = live.control_plane.as_ref()?;
    let kcp = facts.control_plane.as_ref()?;
    let wanted = kcp.spec.replicas.unwrap_or(1);
    let status = kcp.status.clone().unwrap_or_default();
    let has = status.replicas.unwrap_or(0);
    if has != wanted || status.up_to_date_replicas.unwrap_or(0) < has {
        return Some(format!(
            "KubeadmControlPlane {} is rolling out or scaling ({has} of {wanted} replicas, {} up to date); waiting until it is done",
            kcp.name_any(),
            status.up_to_date_replicas.unwrap_or(0)
        ));
    }
    if facts.other_remediating > 0 {
        return Some("another machine of the control plane is being remediated".into());
    }
    let quorum = usize::try_from(wanted / 2 + 1).unwrap_or(1);
    (wanted > 1 && facts.other_ready < quorum).then(|| {
        format!(
            "only {} other machines of the control plane are ready, fewer than a quorum of {quorum}; waiting",
            facts.other_ready
        )
    })
}

/// Records a new attempt (its number, its start and the machine's newest reboot until then)
/// before anything is asked of metal-api.
fn begin_attempt(
    mut status: MetalStackRemediationStatus,
    generation: Option<i64>,
    now: jiff::Timestamp,
    kind: RemediationType,
    machine: &super::model::MetalFacts,
) -> RemediationDecision {
    status.retry_count += 1;
    status.last_remediated = Some(to_the_second(now));
    status.previous_reboot = machine.last_planned_reboot.map(MicroTime);
    status.phase = Some(RemediationPhase::Running);
    let (reason, what) = attempt_words(kind);
    let note = format!("attempt {}: {what}", status.retry_count);
    let mut conditions = Conditions::of(&mut status.conditions, generation);
    conditions.set_true(Type::Remediating, reason, note);
    conditions.set_false(Type::Ready, reason, "the node is not back yet");
    Decision::new(
        RemediationStep::Nothing,
        status,
        Requeue::After(Duration::ZERO),
    )
}

fn attempt_words(kind: RemediationType) -> (Reason, &'static str) {
    match kind {
        RemediationType::Reboot => (Reason::PowerCycled, "power cycle"),
        RemediationType::Reinstall => (Reason::Reinstalling, "reinstall"),
    }
}

/// An attempt under way: asked of metal-api once, then waited for until the node is back or the
/// attempt times out (then the next one, or the Machine is given up).
fn attempt(
    msr: &MetalStackRemediation,
    live: &Live,
    machine: &super::model::MetalFacts,
    mut status: MetalStackRemediationStatus,
) -> RemediationDecision {
    let generation = msr.metadata.generation;
    let strategy = msr.spec.strategy();
    let Some(began) = status.last_remediated.as_ref().map(|t| t.0) else {
        return begin_attempt(status, generation, live.now, strategy.kind(), machine);
    };
    // Told by metal-api's clock alone: a reboot newer than the newest when the attempt began.
    // (to the microsecond the status keeps).
    let before = status
        .previous_reboot
        .as_ref()
        .map(|t| t.0.as_microsecond());
    let rebooted = machine
        .last_planned_reboot
        .is_some_and(|at| before.is_none_or(|b| at.as_microsecond() > b));
    let asked = status
        .last_power_action
        .as_ref()
        .is_some_and(|a| a.accepted && a.time.0 >= began);
    let action = action_name(strategy.kind());
    if !asked && rebooted {
        // Asked before capms stopped, without the answer recorded: metal-api shows it.
        let at = machine.last_planned_reboot.unwrap_or(live.now);
        status.last_power_action =
            Some(record(action, at, true, "OK (seen in metal-api's events)"));
        return Decision::new(
            RemediationStep::Nothing,
            status,
            Requeue::After(Duration::ZERO),
        );
    }
    if !asked {
        status.last_power_action = Some(record(action, live.now, true, "OK"));
        let step = RemediationStep::attempt(strategy.kind(), machine);
        return Decision::new(step, status, Requeue::After(ATTEMPT_POLL));
    }
    let node_back = live.machine.as_ref().is_some_and(|m| m.node_ready());
    if rebooted && machine.phoned_home.is_some() && node_back {
        return succeeded(msr, live, status);
    }
    let waited = crate::reconciler::clock::elapsed(began, live.now, CLOCK_SKEW).unwrap_or_default();
    let timeout = strategy.timeout();
    if waited < timeout {
        let next = (timeout - waited).min(ATTEMPT_POLL);
        return Decision::new(RemediationStep::Nothing, status, Requeue::After(next));
    }
    if status.retry_count < strategy.retry_limit() {
        return begin_attempt(status, generation, live.now, strategy.kind(), machine);
    }
    let note = format!(
        "the node did not come back within {}s after each of {} attempts: handed back for replacement",
        timeout.as_secs(),
        status.retry_count
    );
    give_up(msr, live, status, Reason::RetriesExhausted, note)
}

fn action_name(kind: RemediationType) -> &'static str {
    match kind {
        RemediationType::Reboot => "Cycle",
        RemediationType::Reinstall => "Reinstall",
    }
}

fn record(action: &str, at: jiff::Timestamp, accepted: bool, answer: &str) -> PowerActionRecord {
    PowerActionRecord {
        action: action.into(),
        time: to_the_second(at),
        accepted,
        answer: answer.chars().take(1024).collect(),
    }
}

/// `at` to the second, as a status keeps a Time: a status equal on the wire is equal here too.
/// A write the apiserver finds unchanged sends no watch event, and the reconcile after it would
/// wait for one (`reconciler::own_writes`): two refusals within a second held the third back
/// for 30 s.
fn to_the_second(at: jiff::Timestamp) -> Time {
    Time(jiff::Timestamp::from_second(at.as_second()).unwrap_or(at))
}

/// The node is back: the remediation succeeded, and the Machine's attempts are wound up.
fn succeeded(
    msr: &MetalStackRemediation,
    live: &Live,
    mut status: MetalStackRemediationStatus,
) -> RemediationDecision {
    status.phase = Some(RemediationPhase::Succeeded);
    let note = format!(
        "the node is Ready again after attempt {}",
        status.retry_count
    );
    let mut conditions = Conditions::of(&mut status.conditions, msr.metadata.generation);
    conditions.set_false(Type::Remediating, Reason::Remediated, note.clone());
    conditions.set_true(Type::Ready, Reason::Remediated, note);
    let step =
        conclusion(live, &status).map_or(RemediationStep::Nothing, RemediationStep::Conclude);
    Decision::new(step, status, Requeue::AwaitChange)
}

/// Succeeded: the Machine's attempts wound up until the MachineHealthCheck, seeing it healthy,
/// deletes the remediation. A node that is not Ready again for the strategy's timeout before
/// that hung again: the Machine is handed back for replacement.
fn after_success(
    msr: &MetalStackRemediation,
    live: &Live,
    status: MetalStackRemediationStatus,
) -> RemediationDecision {
    let step =
        conclusion(live, &status).map_or(RemediationStep::Nothing, RemediationStep::Conclude);
    let Some(machine) = live.machine.as_ref().filter(|m| !m.node_ready()) else {
        return Decision::new(step, status, Requeue::AwaitChange);
    };
    let timeout = msr.spec.strategy().timeout();
    let since = machine
        .condition(NODE_READY)
        .map(|c| c.last_transition_time.0);
    let down = since.and_then(|at| crate::reconciler::clock::elapsed(at, live.now, CLOCK_SKEW));
    match down {
        Some(down) if down >= timeout => {
            let note = format!(
                "the node has not been Ready for {}s since its remediation succeeded: handed back for replacement",
                down.as_secs()
            );
            give_up(msr, live, status, Reason::RemediatedRecently, note)
        }
        down => {
            let left = timeout.saturating_sub(down.unwrap_or_default());
            Decision::new(step, status, Requeue::After(left.min(ATTEMPT_POLL)))
        }
    }
}

/// The Machine is handed back to its owner for replacement.
fn give_up(
    msr: &MetalStackRemediation,
    live: &Live,
    mut status: MetalStackRemediationStatus,
    reason: Reason,
    mut note: String,
) -> RemediationDecision {
    status.phase = Some(RemediationPhase::Exhausted);
    if let Some((cluster, _)) = retirement(msr, live, &status) {
        let id = status.machine_id.as_deref().unwrap_or_default();
        note.push_str(&format!(
            "; machine {id} is retired, recorded on MetalStackCluster {cluster}: it stays allocated, out of the pool"
        ));
    }
    let mut conditions = Conditions::of(&mut status.conditions, msr.metadata.generation);
    conditions.set_false(Type::Remediating, reason, note.clone());
    conditions.set_false(Type::Ready, reason, note);
    given_up(msr, live, status)
}

/// Exhausted: the machine recorded retired first when the strategy retires it (so that it is
/// not freed with the Machine), then `OwnerRemediated=False` on the Machine until it has it.
fn given_up(
    msr: &MetalStackRemediation,
    live: &Live,
    status: MetalStackRemediationStatus,
) -> RemediationDecision {
    let note = crate::reconciler::conditions::find(&status.conditions, Type::Remediating)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    if let Some((cluster, key)) = retirement(msr, live, &status) {
        let of = format!("{}/{}", msr.namespace().unwrap_or_default(), msr.name_any());
        let why = format!("Machine {of} was given up by its remediation: {note}");
        let step = RemediationStep::Retire {
            cluster,
            machine: status.machine_id.clone().unwrap_or_default(),
            record: json!({"metadata": {"annotations": {key: why}}}),
        };
        // The MetalStackCluster's change does not wake a remediation.
        let next = Requeue::After(Duration::from_secs(1));
        return Decision::new(step, status, next);
    }
    let marked = live.machine.as_ref().is_none_or(|m| {
        m.metadata.deletion_timestamp.is_some()
            || m.condition(OWNER_REMEDIATED)
                .is_some_and(|c| c.status == "False" && c.reason == GIVEN_UP_REASON)
    });
    let step = match marked {
        true => RemediationStep::Nothing,
        false => RemediationStep::GiveUp(owner_remediated(&note, live.now)),
    };
    Decision::new(step, status, Requeue::AwaitChange)
}

/// Where the machine is to be recorded retired (the MetalStackCluster and the annotation), when
/// the strategy retires it, and the cluster does not record it yet. A machine whose ID cannot
/// name an annotation, or whose cluster has no MetalStackCluster, is freed as usual.
fn retirement(
    msr: &MetalStackRemediation,
    live: &Live,
    status: &MetalStackRemediationStatus,
) -> Option<(String, String)> {
    if msr.spec.strategy().on_exhaustion() != ExhaustionPolicy::Retire {
        return None;
    }
    let id = status.machine_id.as_deref()?;
    let record = live.cluster_record.as_ref()?;
    let key = retired_annotation(id)?;
    (!record.retired.contains(id)).then(|| (record.name.clone(), key))
}

/// The Machine's `OwnerRemediated=False` condition, as a server-side apply of its status.
fn owner_remediated(note: &str, now: jiff::Timestamp) -> serde_json::Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "status": {"conditions": [{
            "type": OWNER_REMEDIATED, "status": "False", "reason": GIVEN_UP_REASON,
            "message": format!("capms gave the remediation up: {note}"),
            "lastTransitionTime": now.to_string(),
        }]},
    })
}

/// Nothing can be done yet: the phase and conditions say why.
fn waiting(
    status: &mut MetalStackRemediationStatus,
    generation: Option<i64>,
    reason: Reason,
    message: String,
) {
    status.phase = Some(RemediationPhase::Waiting);
    let mut conditions = Conditions::of(&mut status.conditions, generation);
    conditions.set_false(Type::Remediating, reason, message.clone());
    conditions.set_false(Type::Ready, reason, message);
}

/// The status after a failure that shows in it: metal-api refused an attempt (`attempted`; its
/// answer is recorded and the attempt asked again, with the error's backoff) or a read.
pub(crate) fn after_failure(
    msr: &MetalStackRemediation,
    mut status: MetalStackRemediationStatus,
    error: &Error,
    attempted: bool,
) -> MetalStackRemediationStatus {
    let action = action_name(msr.spec.strategy().kind());
    let answer = error.to_string();
    let reason = Reason::Failed(error.category());
    let generation = msr.metadata.generation;
    if !attempted {
        let note = format!("reading the machine from metal-api failed: {answer}; looking again");
        Conditions::of(&mut status.conditions, generation).set_false(Type::Ready, reason, note);
        return status;
    }
    status.last_power_action = Some(record(action, jiff::Timestamp::now(), false, &answer));
    let note = format!("metal-api refused the {action}: {answer}; asking again");
    let mut conditions = Conditions::of(&mut status.conditions, generation);
    conditions.set_false(Type::Remediating, reason, note.clone());
    conditions.set_false(Type::Ready, reason, note);
    status
}
