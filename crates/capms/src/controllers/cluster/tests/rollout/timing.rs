//! A rollout's times and words: the deadline to the second, the wait before the next attempt,
//! what the firewall rolling in says of itself, and the role of a firewall while none serves.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

#[test]
fn attempts_wait_one_two_four_eight_then_sixteen_minutes() {
    let waits = [1, 2, 3, 4, 5, 9].map(|failed| backoff(failed).as_secs() / 60);
    assert_eq!(waits, [1, 2, 4, 8, 16, 16]);
}

#[test]
fn a_firewall_rolling_in_is_looked_at_again_by_its_deadline_and_fails_at_it() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let young = firewall("fw-2", false, DEADLINE - Duration::from_secs(30), false);
    let d = run(&wanting("fw-2", None), seen(vec![old.clone(), young]));
    assert!(matches!(d.step, ClusterStep::Nothing), "{:?}", d.step);
    assert_eq!(next(&d), Requeue::After(Duration::from_secs(30)));
    let due = firewall("fw-2", false, DEADLINE, false);
    let d = run(&wanting("fw-2", None), seen(vec![old, due]));
    assert!(
        matches!(d.step, ClusterStep::RetireFirewall(_, Retire::Failed(_))),
        "{:?}",
        d.step
    );
}

#[test]
fn what_the_firewall_rolling_in_says_of_itself_is_passed_on() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let mut rolling = firewall("fw-2", false, MINUTE, false);
    let said = |message: &str| Condition {
        type_: "Ready".into(),
        status: "False".into(),
        reason: "Provisioning".into(),
        message: message.into(),
        last_transition_time: Time(now()),
        observed_generation: None,
    };
    if let Some(status) = rolling.status.as_mut() {
        status.conditions = vec![said("installing the firewall image")];
    }
    let d = run(
        &wanting("fw-2", None),
        seen(vec![old.clone(), rolling.clone()]),
    );
    let message = condition(&d, Type::FirewallRolledOut).2;
    assert!(
        message.contains("changed firewall spec: installing the firewall image;"),
        "{message}"
    );
    if let Some(status) = rolling.status.as_mut() {
        status.conditions = vec![said("")];
    }
    let d = run(&wanting("fw-2", None), seen(vec![old, rolling]));
    let message = condition(&d, Type::FirewallRolledOut).2;
    assert!(
        message.contains("changed firewall spec; "),
        "nothing said: {message}"
    );
}

#[test]
fn a_new_firewall_failing_after_another_failed_counts_its_own_first_attempt() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let late = firewall("fw-2", false, DEADLINE + MINUTE, false);
    // An earlier spec's firewall failed just now.
    let earlier = FirewallRolloutStatus {
        failed_attempts: 3,
        last_failed: Some("prod-firewall-earlier".into()),
        last_failure_time: Some(Time(now())),
        ..Default::default()
    };
    let d = run(&wanting("fw-2", Some(earlier)), seen(vec![old, late]));
    assert_eq!(rollout(&d).failed_attempts, 1);
}

#[test]
fn another_firewall_being_deleted_does_not_hold_the_rollout_up() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let mut going = firewall("fw-3", false, MINUTE, false);
    going.metadata.deletion_timestamp = Some(Time(now()));
    let d = run(&wanting("fw-2", None), seen(vec![old, going]));
    assert!(
        matches!(d.step, ClusterStep::RollInFirewall(_)),
        "{:?}",
        d.step
    );
}

#[test]
fn the_wait_before_the_next_attempt_is_said_to_the_second() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let failed = FirewallRolloutStatus {
        phase: RolloutPhase::Failed,
        failed_attempts: 1,
        last_failed: Some(rolled_name("prod", &firewall("fw-2", false, MINUTE, false))),
        last_failure: Some("it did not".into()),
        last_failure_time: Some(Time(now() - jiff::SignedDuration::from_secs(20))),
        ..Default::default()
    };
    let d = run(&wanting("fw-2", Some(failed)), seen(vec![old]));
    assert_eq!(next(&d), Requeue::After(Duration::from_secs(40)));
    let message = condition(&d, Type::FirewallRolledOut).2;
    assert!(message.ends_with("trying again in 40s"), "{message}");
}

#[test]
fn a_firewall_rolling_in_while_none_serves_is_relabelled_as_provisioning() {
    // The first firewall never became ready; the spec changed, its firewall is on its way too.
    let booting = firewall("fw-1", true, MINUTE, false);
    let rolling = firewall("fw-2", false, MINUTE, false);
    let d = run(&wanting("fw-2", None), seen(vec![booting, rolling]));
    let ClusterStep::RelabelFirewall { labels, .. } = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(
        labels.get(FIREWALL_ROLE_LABEL).map(String::as_str),
        Some("Provisioning")
    );
}
