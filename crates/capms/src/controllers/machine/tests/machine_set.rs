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

/// Observed at `now` while the replica's MachineSet `set` creates replicas (None: it does not).
fn not_taken_up(now: jiff::Timestamp, set: Option<MachineSetPace>) -> Live {
    let machine = capi_machine(Some("bootstrap"));
    let gate = MachineGate::NotTakenUp {
        machine,
        machine_set: set,
    };
    Live { now, gate }
}

#[test]
fn a_replica_waits_unwritten_while_its_machine_set_creates_the_rest() {
    use std::time::Duration;
    let (fresh, created) = new_replica();
    let at = |seconds: u64, creating: bool, wait: u64| {
        let wait = Duration::from_secs(wait);
        let set = creating.then_some(MachineSetPace { newest: None, wait });
        not_taken_up(created + Duration::from_secs(seconds), set)
    };
    let d = live_run(&fresh, at(10, true, 60));
    assert_eq!(d.step, MachineStep::Nothing, "no finalizer yet");
    assert_eq!(
        d.status,
        MetalStackMachineStatus::default(),
        "nothing written"
    );
    assert_eq!(requeue(&d), Requeue::After(Duration::from_secs(30)));
    let d = live_run(&fresh, at(58, true, 60));
    assert_eq!(
        requeue(&d),
        Requeue::After(Duration::from_secs(2)),
        "not past the wait"
    );

    for (why, live) in [
        ("the wait is over", at(60, true, 60)),
        ("the MachineSet has created its replicas", at(10, false, 60)),
        ("--machine-set-wait=0s", at(10, true, 0)),
    ] {
        let d = live_run(&fresh, live);
        assert_eq!(d.step, MachineStep::AddFinalizer, "{why}");
    }
    let skewed = |behind: u64| Live {
        now: created - Duration::from_secs(behind),
        ..at(0, true, 60)
    };
    let d = live_run(&fresh, skewed(5));
    assert_eq!(
        requeue(&d),
        Requeue::After(Duration::from_secs(30)),
        "a clock a little behind the apiserver's waits as if the object were new"
    );
    let d = live_run(&fresh, skewed(3600));
    assert_eq!(
        d.step,
        MachineStep::AddFinalizer,
        "one far behind does not wait"
    );
    let mut undated = fresh.clone();
    undated.metadata.creation_timestamp = None;
    let d = live_run(&undated, at(10, true, 60));
    assert_eq!(d.step, MachineStep::AddFinalizer, "no age, no wait");
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
        not_taken_up(created + secs(seconds), Some(pace(newest, secs(60))))
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
        let d = live_run(&fresh, live);
        assert_eq!(d.step, MachineStep::Nothing, "{why}");
        assert_eq!(requeue(&d), Requeue::After(left), "{why}");
    }
    for (why, live) in [
        (
            "no replica created for the wait: stalled",
            at(140, Some(80)),
        ),
        ("ten times the wait in all", at(600, Some(599))),
    ] {
        let d = live_run(&fresh, live);
        assert_eq!(d.step, MachineStep::AddFinalizer, "{why}");
    }
    let d = live_run(&fresh, at(90, Some(90 + 30)));
    assert_eq!(
        requeue(&d),
        Requeue::After(secs(30)),
        "a sibling a little in the future (clock skew) counts as just created"
    );
    let d = live_run(&fresh, at(30, Some(30 + 3600)));
    assert_eq!(
        d.step,
        MachineStep::AddFinalizer,
        "one far in the future is no known time: no wait, as for the replica itself"
    );
    let huge = not_taken_up(created + secs(30), Some(pace(Some(20), Duration::MAX)));
    let d = live_run(&fresh, huge);
    assert_eq!(
        d.step,
        MachineStep::Nothing,
        "a wait too long to multiply waits"
    );
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
