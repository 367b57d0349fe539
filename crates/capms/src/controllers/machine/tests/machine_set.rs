//! A new replica waits, unwritten, while its MachineSet creates the rest.

use super::*;

/// A MetalStackMachine capms has not taken up yet, and its creation time.
fn new_replica() -> (MetalStackMachine, jiff::Timestamp) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let created = jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_hours(1);
    let mut fresh = msm();
    fresh.metadata.finalizers = None;
    fresh.metadata.creation_timestamp = Some(Time(created));
    (fresh, created)
}

/// How long the replica waits at `now` while its MachineSet `set` creates replicas (None: it
/// does not, and the replica goes on).
fn hold(
    msm: &MetalStackMachine,
    now: jiff::Timestamp,
    set: Option<MachineSetPace>,
) -> Option<std::time::Duration> {
    set.and_then(|set| set.hold(msm, now))
}

#[test]
fn a_replica_waits_unwritten_while_its_machine_set_creates_the_rest() {
    use std::time::Duration;
    let (fresh, created) = new_replica();
    let set = |creating: bool, wait: u64| {
        let wait = Duration::from_secs(wait);
        creating.then_some(MachineSetPace { newest: None, wait })
    };
    let at = |seconds: u64| created + Duration::from_secs(seconds);
    assert_eq!(
        hold(&fresh, at(10), set(true, 60)),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        hold(&fresh, at(58), set(true, 60)),
        Some(Duration::from_secs(2)),
        "not past the wait"
    );
    for (why, left) in [
        ("the wait is over", hold(&fresh, at(60), set(true, 60))),
        (
            "the MachineSet has created its replicas",
            hold(&fresh, at(10), set(false, 60)),
        ),
        ("--machine-set-wait=0s", hold(&fresh, at(10), set(true, 0))),
    ] {
        assert_eq!(left, None, "{why}");
    }
    let behind = |seconds: u64| created - Duration::from_secs(seconds);
    assert_eq!(
        hold(&fresh, behind(5), set(true, 60)),
        Some(Duration::from_secs(30)),
        "a clock a little behind the apiserver's waits as if the object were new"
    );
    assert_eq!(
        hold(&fresh, behind(3600), set(true, 60)),
        None,
        "one far behind does not wait"
    );
    let mut undated = fresh.clone();
    undated.metadata.creation_timestamp = None;
    assert_eq!(
        hold(&undated, at(10), set(true, 60)),
        None,
        "no age, no wait"
    );
}

#[test]
fn a_held_replica_is_left_unwritten_until_it_looks_again() {
    use std::time::Duration;
    let (fresh, created) = new_replica();
    let left = Duration::from_secs(17);
    let live = Live {
        now: created,
        gate: MachineGate::HeldByMachineSet { left },
    };
    let d = live_run(&fresh, live);
    assert_eq!(d.step, MachineStep::Nothing, "no finalizer, no allocation");
    assert_eq!(
        d.status,
        MetalStackMachineStatus::default(),
        "nothing written"
    );
    assert_eq!(requeue(&d), Requeue::After(left));
}

#[test]
fn a_held_replica_is_allocated_at_once_and_left_unwritten_until_the_wait_ends() {
    use std::time::Duration;
    let (fresh, created) = new_replica();
    let left = Duration::from_secs(17);
    let held = |found: Found, held: Option<Duration>| Live {
        now: created,
        gate: MachineGate::Open(Box::new(MachineInputs {
            held,
            ..open(found)
        })),
    };
    let d = live_run(&fresh, held(Found::Nothing, Some(left)));
    assert!(
        matches!(d.step, MachineStep::Allocate(_)),
        "its machine installs while the MachineSet creates the rest: {:?}",
        d.step
    );
    assert_eq!(
        d.status,
        MetalStackMachineStatus::default(),
        "nothing written"
    );
    assert_eq!(requeue(&d), Requeue::Now);
    for last in ["Installing", "Phoned Home"] {
        let d = live_run(&fresh, held(ours(last), Some(left)));
        assert_eq!(
            d.step,
            MachineStep::Nothing,
            "not named while held ({last})"
        );
        assert_eq!(
            d.status,
            MetalStackMachineStatus::default(),
            "nothing written"
        );
        assert_eq!(requeue(&d), Requeue::After(left));
    }
    let mut without_data = open(Found::Nothing);
    without_data.user_data = None;
    without_data.held = Some(left);
    let d = live_run(
        &fresh,
        Live {
            now: created,
            gate: MachineGate::Open(Box::new(without_data)),
        },
    );
    assert_eq!(
        d.step,
        MachineStep::Nothing,
        "no bootstrap data: nothing to allocate"
    );
    assert_eq!(
        d.status,
        MetalStackMachineStatus::default(),
        "its wait unwritten"
    );
    assert_eq!(requeue(&d), Requeue::After(left));
    let d = live_run(&fresh, held(ours("Phoned Home"), None));
    assert!(
        matches!(d.step, MachineStep::Record(_)),
        "named once the wait ends: {:?}",
        d.step
    );
}

#[test]
fn a_replica_waits_while_its_machine_set_keeps_creating_and_no_longer_once_it_stalls() {
    use std::time::Duration;
    let (fresh, created) = new_replica();
    let secs = Duration::from_secs;
    let pace = |newest: Option<i64>, wait: Duration| MachineSetPace {
        newest: newest.map(|n| created + jiff::SignedDuration::from_secs(n)),
        wait,
    };
    let at = |seconds: u64, newest: Option<i64>| {
        hold(
            &fresh,
            created + secs(seconds),
            Some(pace(newest, secs(60))),
        )
    };
    for (why, live, left) in [
        ("a sibling created 10 s ago", at(90, Some(80)), secs(30)),
        ("a sibling created 40 s ago", at(100, Some(60)), secs(20)),
        ("a sibling created 58 s ago", at(118, Some(60)), secs(2)),
        (
            "the replica itself is the newest",
            at(30, Some(0)),
            secs(30),
        ),
        (
            "an older sibling does not shorten it",
            at(30, Some(-100)),
            secs(30),
        ),
        ("nor at its end", at(58, Some(-100)), secs(2)),
        ("no sibling seen: its own creation", at(30, None), secs(30)),
        (
            "close to the limit of ten waits",
            at(598, Some(597)),
            secs(2),
        ),
    ] {
        assert_eq!(live, Some(left), "{why}");
    }
    for (why, live) in [
        (
            "no replica created for the wait: stalled",
            at(140, Some(80)),
        ),
        ("ten times the wait in all", at(600, Some(599))),
    ] {
        assert_eq!(live, None, "{why}");
    }
    assert_eq!(
        at(90, Some(90 + 30)),
        Some(secs(30)),
        "a sibling a little in the future (clock skew) counts as just created"
    );
    assert_eq!(
        at(30, Some(30 + 3600)),
        None,
        "one far in the future is no known time: no wait, as for the replica itself"
    );
    let huge = hold(
        &fresh,
        created + secs(30),
        Some(pace(Some(20), Duration::MAX)),
    );
    assert!(huge.is_some(), "a wait too long to multiply waits");
}

#[test]
fn a_machine_sets_newest_replica_is_read_by_its_uid() {
    let set: crate::capi::MachineSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "metadata": {"name": "workers", "namespace": "ns", "uid": "u"},
        "spec": {"replicas": 3},
    }))
    .unwrap_or_else(|e| panic!("machine set: {e}"));
    let machine = |kind: &str, uid: &str, created: Option<&str>| -> CapiMachine {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns", "creationTimestamp": created,
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                                              "kind": kind, "name": "workers", "uid": uid}]},
            "spec": {"clusterName": "c"},
        }))
        .unwrap_or_else(|e| panic!("machine: {e}"))
    };
    let at = "2026-11-26T10:00:00Z";
    assert_eq!(
        set.replica_created(&machine("MachineSet", "u", Some(at))),
        at.parse().ok(),
        "its replica"
    );
    for (why, m) in [
        (
            "a MachineSet of the same name made before it",
            machine("MachineSet", "gone", Some(at)),
        ),
        (
            "another kind of owner",
            machine("MachineDeployment", "u", Some(at)),
        ),
        ("no creation time", machine("MachineSet", "u", None)),
    ] {
        assert_eq!(set.replica_created(&m), None, "{why}");
    }
}
