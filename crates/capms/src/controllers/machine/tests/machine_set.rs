//! A new replica waits, unwritten, while its MachineSet creates the rest.

use super::*;

#[test]
fn a_replica_waits_unwritten_while_its_machine_set_creates_the_rest() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::time::Duration;
    let created = jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_hours(1);
    let mut fresh = msm();
    fresh.metadata.finalizers = None;
    fresh.metadata.creation_timestamp = Some(Time(created));
    let at = |seconds: u64, creating: bool, wait: u64| Live {
        now: created + Duration::from_secs(seconds),
        machine_set_creating: creating,
        machine_set_wait: Duration::from_secs(wait),
        ..live(Found::Nothing)
    };
    let d = live_run(&fresh, at(10, true, 60));
    assert_eq!(d.step, Step::Nothing, "no finalizer yet");
    assert_eq!(
        d.status,
        MetalStackMachineStatus::default(),
        "nothing written"
    );
    assert_eq!(requeue(&d), Requeue::After(Duration::from_secs(5)));
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
        assert_eq!(d.step, Step::AddFinalizer, "{why}");
    }
    let skewed = |behind: u64| Live {
        now: created - Duration::from_secs(behind),
        ..at(0, true, 60)
    };
    let d = live_run(&fresh, skewed(5));
    assert_eq!(
        requeue(&d),
        Requeue::After(Duration::from_secs(5)),
        "a clock a little behind the apiserver's waits as if the object were new"
    );
    let d = live_run(&fresh, skewed(3600));
    assert_eq!(d.step, Step::AddFinalizer, "one far behind does not wait");
    let mut undated = fresh.clone();
    undated.metadata.creation_timestamp = None;
    let d = live_run(&undated, at(10, true, 60));
    assert_eq!(d.step, Step::AddFinalizer, "no age, no wait");
    let d = live_run(&msm(), at(10, true, 60));
    assert!(
        matches!(d.step, Step::Allocate(_)),
        "a machine capms has taken up never waits again: {:?}",
        d.step
    );
}
