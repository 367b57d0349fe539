//! The remediation decision, case by case.

mod api_v2;

use super::decide::{FINALIZER, GIVEN_UP_REASON, REMEDIATED_ANNOTATION, after_failure, decide};
use super::model::{ClusterRecord, ControlPlaneFacts, Live, MetalFacts, Observed, RemediationStep};
use crate::api::remediation::{
    MetalStackRemediation, MetalStackRemediationStatus, PowerActionRecord, RemediationPhase,
};
use crate::capi::{KubeadmControlPlane, Machine};
use crate::ownership::RETIRED_PREFIX;
use crate::reconciler::conditions::Type;
use crate::reconciler::{Error, Requeue};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use serde_json::json;
use std::time::Duration;

const ID: &str = "00000000-0000-0000-0000-0000000000a1";

fn at(seconds: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap_or_else(|e| panic!("{e}"))
}

fn remediation(
    strategy: serde_json::Value,
    status: MetalStackRemediationStatus,
) -> MetalStackRemediation {
    let mut msr: MetalStackRemediation = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackRemediation",
        "metadata": {"name": "w1", "namespace": "ns", "generation": 1, "finalizers": [FINALIZER],
                     "creationTimestamp": at(0).to_string()},
        "spec": {"strategy": strategy},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    msr.status = Some(status);
    msr
}

fn machine(node_ready: bool, annotations: serde_json::Value) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "w1", "namespace": "ns", "annotations": annotations},
        "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MetalStackMachine", "name": "w1"}},
        "status": {"conditions": [{"type": "NodeReady", "status": if node_ready {"True"} else {"Unknown"},
                    "reason": "r", "message": "", "lastTransitionTime": at(0).to_string()}]},
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn live(node_ready: bool, metal: MetalFacts, now: i64) -> Live {
    Live {
        machine: Some(machine(node_ready, json!({}))),
        infrastructure: Some(crate::api::MetalStackMachine::new("w1", Default::default())),
        metal: Some(metal),
        control_plane: None,
        cluster_record: Some(ClusterRecord {
            name: "c".into(),
            retired: Default::default(),
        }),
        now: at(now),
    }
}

fn hung() -> MetalFacts {
    MetalFacts {
        id: ID.into(),
        image: "ubuntu-24.04".into(),
        last_planned_reboot: None,
        phoned_home: Some(at(-3600)),
        reinstallable: true,
    }
}

/// Attempt `count` began at `began`; asked of metal-api (accepted) when `asked`.
fn attempted(count: i32, began: i64, asked: bool) -> MetalStackRemediationStatus {
    MetalStackRemediationStatus {
        phase: Some(RemediationPhase::Running),
        retry_count: count,
        last_remediated: Some(Time(at(began))),
        machine_id: Some(ID.into()),
        last_power_action: asked.then(|| PowerActionRecord {
            action: "Cycle".into(),
            time: Time(at(began + 1)),
            accepted: true,
            answer: "OK".into(),
        }),
        previous_reboot: None,
        conditions: vec![],
    }
}

fn run(msr: &MetalStackRemediation, live: Live) -> super::model::RemediationDecision {
    decide(msr, &Observed::Live(Box::new(live)))
}

#[test]
fn a_new_remediation_gets_the_finalizer_then_records_its_first_attempt_before_asking() {
    let mut msr = remediation(json!({}), Default::default());
    msr.metadata.finalizers = None;
    assert_eq!(
        run(&msr, live(false, hung(), 5)).step,
        RemediationStep::AddFinalizer
    );
    let msr = remediation(json!({}), Default::default());
    let d = run(&msr, live(false, hung(), 5));
    assert_eq!(
        d.step,
        RemediationStep::Nothing,
        "recorded first, asked in the next reconcile"
    );
    assert_eq!(d.status.retry_count, 1);
    assert_eq!(d.status.last_remediated, Some(Time(at(5))));
    assert_eq!(d.status.previous_reboot, None, "no reboot before");
    assert_eq!(d.status.phase, Some(RemediationPhase::Running));
    assert_eq!(d.next.ok(), Some(Requeue::After(Duration::ZERO)));
}

#[test]
fn a_recorded_attempt_is_asked_once_as_its_strategy_says() {
    let msr = remediation(json!({}), attempted(1, 5, false));
    let d = run(&msr, live(false, hung(), 6));
    assert_eq!(d.step, RemediationStep::PowerCycle(ID.into()));
    assert!(
        d.status
            .last_power_action
            .is_some_and(|a| a.accepted && a.action == "Cycle")
    );
    let msr = remediation(json!({"type": "Reinstall"}), attempted(1, 5, false));
    let d = run(&msr, live(false, hung(), 6));
    assert_eq!(
        d.step,
        RemediationStep::Reinstall(ID.into(), "ubuntu-24.04".into())
    );
    // Asked: waited for, not asked again.
    let msr = remediation(json!({}), attempted(1, 5, true));
    let d = run(&msr, live(false, hung(), 20));
    assert_eq!(d.step, RemediationStep::Nothing);
    assert_eq!(d.next.ok(), Some(Requeue::After(Duration::from_secs(10))));
}

#[test]
fn an_attempt_asked_but_not_recorded_is_read_from_metal_apis_events_not_asked_twice() {
    let msr = remediation(json!({}), attempted(1, 5, false));
    let rebooted = MetalFacts {
        last_planned_reboot: Some(at(6)),
        ..hung()
    };
    let d = run(&msr, live(false, rebooted, 8));
    assert_eq!(d.step, RemediationStep::Nothing);
    let action = d
        .status
        .last_power_action
        .unwrap_or_else(|| panic!("recorded"));
    assert!(action.accepted && action.time == Time(at(6)), "{action:?}");
    // A reboot metal-api showed when the attempt began (an earlier attempt's, or an earlier
    // remediation's a second before) is no answer to this one.
    let mut status = attempted(1, 7, false);
    status.previous_reboot = Some(MicroTime(at(6)));
    let msr = remediation(json!({}), status);
    let earlier = MetalFacts {
        last_planned_reboot: Some(at(6)),
        ..hung()
    };
    let d = run(&msr, live(false, earlier, 8));
    assert_eq!(d.step, RemediationStep::PowerCycle(ID.into()));
}

#[test]
fn a_node_back_after_the_reboot_succeeds_and_winds_the_machine_up() {
    let msr = remediation(json!({}), attempted(1, 5, true));
    let back = MetalFacts {
        last_planned_reboot: Some(at(6)),
        phoned_home: Some(at(60)),
        ..hung()
    };
    let d = run(&msr, live(true, back.clone(), 70));
    assert_eq!(d.status.phase, Some(RemediationPhase::Succeeded));
    let RemediationStep::Conclude(patch) = &d.step else {
        panic!("{:?}", d.step)
    };
    let annotations = &patch["metadata"]["annotations"];
    assert!(annotations["cluster.x-k8s.io/remediate-machine"].is_null());
    assert_eq!(annotations[REMEDIATED_ANNOTATION], json!(at(5).to_string()));
    // Not back while the node is not Ready, nor while the machine has not phoned home again.
    assert_eq!(
        run(&msr, live(false, back, 70)).status.phase,
        Some(RemediationPhase::Running)
    );
    let rebooting = MetalFacts {
        last_planned_reboot: Some(at(6)),
        phoned_home: None,
        ..hung()
    };
    assert_eq!(
        run(&msr, live(true, rebooting, 70)).status.phase,
        Some(RemediationPhase::Running)
    );
}

#[test]
fn a_timed_out_attempt_is_followed_by_the_next_until_the_limit_then_the_machine_is_given_up() {
    let msr = remediation(
        json!({"retryLimit": 2, "timeoutSeconds": 100}),
        attempted(1, 5, true),
    );
    let d = run(&msr, live(false, hung(), 104));
    assert_eq!(d.step, RemediationStep::Nothing);
    assert_eq!(d.next.ok(), Some(Requeue::After(Duration::from_secs(1))));
    let d = run(&msr, live(false, hung(), 106));
    assert_eq!(
        (d.status.retry_count, d.status.last_remediated),
        (2, Some(Time(at(106))))
    );
    let msr = remediation(
        json!({"retryLimit": 2, "timeoutSeconds": 100}),
        attempted(2, 106, true),
    );
    let d = run(&msr, live(false, hung(), 207));
    assert_eq!(d.status.phase, Some(RemediationPhase::Exhausted));
    let RemediationStep::GiveUp(apply) = &d.step else {
        panic!("{:?}", d.step)
    };
    let condition = &apply["status"]["conditions"][0];
    assert_eq!(
        (&condition["type"], &condition["status"]),
        (&json!("OwnerRemediated"), &json!("False"))
    );
    assert_eq!(condition["reason"], json!(GIVEN_UP_REASON));
}

#[test]
fn an_exhausted_remediation_marks_the_machine_once() {
    let mut status = attempted(1, 5, true);
    status.phase = Some(RemediationPhase::Exhausted);
    let msr = remediation(json!({}), status);
    assert!(matches!(
        run(&msr, live(false, hung(), 900)).step,
        RemediationStep::GiveUp(_)
    ));
    let mut marked = live(false, hung(), 900);
    let m = marked.machine.as_mut().unwrap_or_else(|| panic!("machine"));
    let conditions = &mut m
        .status
        .as_mut()
        .unwrap_or_else(|| panic!("status"))
        .conditions;
    conditions.push(
        serde_json::from_value(json!({"type": "OwnerRemediated", "status": "False",
        "reason": GIVEN_UP_REASON, "message": "", "lastTransitionTime": at(0).to_string()}))
        .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(run(&msr, marked).step, RemediationStep::Nothing);
}

#[test]
fn a_retiring_strategy_records_the_machine_on_its_cluster_before_giving_the_machine_up() {
    let strategy = json!({"timeoutSeconds": 100, "onExhaustion": "Retire"});
    let msr = remediation(strategy.clone(), attempted(1, 5, true));
    let d = run(&msr, live(false, hung(), 207));
    assert_eq!(d.status.phase, Some(RemediationPhase::Exhausted));
    let RemediationStep::Retire {
        cluster,
        machine,
        record: patch,
    } = &d.step
    else {
        panic!("{:?}", d.step)
    };
    assert_eq!((cluster.as_str(), machine.as_str()), ("c", ID));
    let key = format!("{RETIRED_PREFIX}{ID}");
    let why = patch["metadata"]["annotations"][&key]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("Machine ns/w1 was given up"), "{why}");
    let ready = crate::reconciler::conditions::find(&d.status.conditions, Type::Ready);
    assert!(
        ready.is_some_and(|c| c.message.contains("retired")),
        "{ready:?}"
    );
    // Recorded (the cache shows it): the Machine is given up.
    let msr = remediation(strategy, d.status);
    let mut recorded = live(false, hung(), 208);
    let record = recorded
        .cluster_record
        .as_mut()
        .unwrap_or_else(|| panic!("record"));
    record.retired.insert(ID.into());
    assert!(matches!(
        run(&msr, recorded).step,
        RemediationStep::GiveUp(_)
    ));
    // Without a MetalStackCluster to record it on, the machine is freed as usual.
    let mut nowhere = live(false, hung(), 208);
    nowhere.cluster_record = None;
    assert!(matches!(
        run(&msr, nowhere).step,
        RemediationStep::GiveUp(_)
    ));
    // Reusing (the default), nothing is recorded.
    let msr = remediation(json!({"timeoutSeconds": 100}), attempted(1, 5, true));
    assert!(matches!(
        run(&msr, live(false, hung(), 207)).step,
        RemediationStep::GiveUp(_)
    ));
}

#[test]
fn a_machine_remediated_within_the_cooldown_is_handed_back_at_once() {
    let msr = remediation(json!({"cooldownSeconds": 3600}), Default::default());
    let mut recent = live(false, hung(), 1000);
    recent.machine = Some(machine(
        false,
        json!({REMEDIATED_ANNOTATION: at(100).to_string()}),
    ));
    let d = run(&msr, recent);
    assert_eq!(d.status.phase, Some(RemediationPhase::Exhausted));
    assert!(matches!(d.step, RemediationStep::GiveUp(_)));
    // Past the cooldown, or without one, it is remediated again.
    let mut old = live(false, hung(), 5000);
    old.machine = Some(machine(
        false,
        json!({REMEDIATED_ANNOTATION: at(100).to_string()}),
    ));
    assert_eq!(run(&msr, old).status.retry_count, 1);
    let msr = remediation(json!({}), Default::default());
    let mut recent = live(false, hung(), 1000);
    recent.machine = Some(machine(
        false,
        json!({REMEDIATED_ANNOTATION: at(100).to_string()}),
    ));
    assert_eq!(run(&msr, recent).status.retry_count, 1);
}

#[test]
fn without_its_machine_a_remediation_waits_and_does_nothing() {
    let msr = remediation(json!({}), Default::default());
    let mut gone = live(false, hung(), 5);
    gone.machine = None;
    let d = run(&msr, gone);
    assert_eq!(
        (d.step, d.status.phase),
        (RemediationStep::Nothing, Some(RemediationPhase::Waiting))
    );
    let mut not_ours = live(false, hung(), 5);
    let mut m = machine(false, json!({}));
    m.spec.infrastructure_ref = None;
    not_ours.machine = Some(m);
    let d = run(&msr, not_ours);
    let reason = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Remediating")
        .map(|c| c.reason.clone());
    assert_eq!(
        (d.step, reason.as_deref()),
        (RemediationStep::Nothing, Some("NotMetalStack"))
    );
    let mut unknown = live(false, hung(), 5);
    unknown.metal = None;
    let d = run(&msr, unknown);
    assert_eq!(
        (d.step, d.next.ok()),
        (RemediationStep::Nothing, Some(Requeue::Poll))
    );
}

fn control_plane(wanted: i32, has: i32, up_to_date: i32, other_ready: usize) -> ControlPlaneFacts {
    let kcp: KubeadmControlPlane = serde_json::from_value(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {"name": "cp", "namespace": "ns"}, "spec": {"replicas": wanted},
        "status": {"replicas": has, "upToDateReplicas": up_to_date},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    ControlPlaneFacts {
        control_plane: Some(kcp),
        other_ready,
        other_remediating: 0,
    }
}

#[test]
fn a_control_plane_machine_waits_while_its_control_plane_rolls_out_or_lacks_quorum() {
    let msr = remediation(json!({}), Default::default());
    let cases = [
        (control_plane(3, 3, 3, 2), 1),
        (control_plane(3, 4, 3, 3), 0),
        (control_plane(3, 3, 2, 2), 0),
        (control_plane(3, 3, 3, 1), 0),
        (control_plane(1, 1, 1, 0), 1),
    ];
    for (facts, attempts) in cases {
        let mut cp = live(false, hung(), 5);
        cp.control_plane = Some(facts.clone());
        let d = run(&msr, cp);
        assert_eq!(d.status.retry_count, attempts, "{facts:?}");
    }
    let mut busy = control_plane(3, 3, 3, 2);
    busy.other_remediating = 1;
    let mut cp = live(false, hung(), 5);
    cp.control_plane = Some(busy);
    assert_eq!(run(&msr, cp).status.phase, Some(RemediationPhase::Waiting));
}

#[test]
fn a_deleted_remediation_winds_its_machine_up_then_lets_go() {
    let msr = remediation(json!({}), attempted(1, 5, true));
    let d = decide(&msr, &Observed::Deleting(Some(live(true, hung(), 70))));
    assert!(matches!(d.step, RemediationStep::Conclude(_)));
    let mut done = live(true, hung(), 70);
    done.machine = Some(machine(
        true,
        json!({REMEDIATED_ANNOTATION: at(5).to_string()}),
    ));
    let d = decide(&msr, &Observed::Deleting(Some(done)));
    assert_eq!(d.step, RemediationStep::RemoveFinalizer);
    let untouched = remediation(json!({}), Default::default());
    let d = decide(
        &untouched,
        &Observed::Deleting(Some(live(true, hung(), 70))),
    );
    assert_eq!(d.step, RemediationStep::RemoveFinalizer);
}

#[test]
fn a_refused_attempt_is_recorded_with_metal_apis_answer_and_asked_again() {
    let msr = remediation(json!({}), attempted(1, 5, false));
    let d = run(&msr, live(false, hung(), 6));
    let refused = Error::Invalid("machine is locked".into());
    let status = after_failure(&msr, d.status, &refused, true);
    let action = status
        .last_power_action
        .clone()
        .unwrap_or_else(|| panic!("recorded"));
    assert!(
        !action.accepted && action.answer.contains("locked"),
        "{action:?}"
    );
    let again = remediation(json!({}), status);
    assert_eq!(
        run(&again, live(false, hung(), 30)).step,
        RemediationStep::PowerCycle(ID.into())
    );
}

#[test]
fn the_reboot_seen_when_an_attempt_began_survives_the_status_round_trip() {
    let reboot = jiff::Timestamp::from_nanosecond(1_800_000_006_112_427_084)
        .unwrap_or_else(|e| panic!("{e}"));
    let seen = MetalFacts {
        last_planned_reboot: Some(reboot),
        ..hung()
    };
    let d = run(
        &remediation(json!({}), Default::default()),
        live(false, seen.clone(), 7),
    );
    let written = serde_json::to_value(&d.status).unwrap_or_else(|e| panic!("{e}"));
    let read: MetalStackRemediationStatus =
        serde_json::from_value(written).unwrap_or_else(|e| panic!("{e}"));
    let msr = remediation(json!({}), read);
    // The reboot from before the attempt is not taken for the attempt's own.
    assert_eq!(
        run(&msr, live(false, seen, 8)).step,
        RemediationStep::PowerCycle(ID.into())
    );
}

#[test]
fn a_node_down_again_for_the_timeout_after_success_is_handed_back() {
    let mut status = attempted(1, 5, true);
    status.phase = Some(RemediationPhase::Succeeded);
    let msr = remediation(json!({"timeoutSeconds": 100}), status);
    let concluded = json!({REMEDIATED_ANNOTATION: at(5).to_string()});
    let mut up = live(true, hung(), 500);
    up.machine = Some(machine(true, concluded.clone()));
    let d = run(&msr, up);
    assert_eq!(
        (d.step, d.next.ok()),
        (RemediationStep::Nothing, Some(Requeue::AwaitChange))
    );
    // NotReady since at(0) (the test Machine's transition): 60 s is within the timeout …
    let mut down = live(false, hung(), 60);
    down.machine = Some(machine(false, concluded.clone()));
    let d = run(&msr, down);
    assert_eq!(d.status.phase, Some(RemediationPhase::Succeeded));
    assert_eq!(d.next.ok(), Some(Requeue::After(Duration::from_secs(10))));
    // … 100 s is not.
    let mut down = live(false, hung(), 100);
    down.machine = Some(machine(false, concluded));
    let d = run(&msr, down);
    assert_eq!(d.status.phase, Some(RemediationPhase::Exhausted));
    assert!(matches!(d.step, RemediationStep::GiveUp(_)));
}
