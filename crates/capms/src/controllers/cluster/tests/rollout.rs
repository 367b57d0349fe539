//! Rolling the firewall: every transition of a rollout as a pure decision.

use super::*;
use crate::api::{FirewallRolloutStatus, MetalStackFirewall, RolloutPhase};
use crate::controllers::cluster::firewall::plan_firewall;
use crate::controllers::cluster::rollout::{MAX_ATTEMPTS, Role, backoff, rolled_name, with_role};
use crate::ownership::FIREWALL_ROLE_LABEL;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const DEADLINE: Duration = Duration::from_secs(600);

fn now() -> jiff::Timestamp {
    "2026-11-26T12:00:00Z".parse().expect("timestamp")
}

fn spec(image: &str) -> MetalStackFirewallSpec {
    MetalStackFirewallSpec {
        image: image.into(),
        machine_type: "v1-small-x86".into(),
        ..Default::default()
    }
}

/// The cluster wanting a firewall with `image`.
fn wanting(image: &str, status: Option<FirewallRolloutStatus>) -> MetalStackCluster {
    let mut c = with_endpoint();
    c.spec.firewall_spec = Some(spec(image));
    c.status = Some(crate::api::MetalStackClusterStatus {
        firewall: status,
        ..Default::default()
    });
    c
}

/// A firewall of the cluster with `image`: named as capms names it, created `age` ago,
/// allocated, and ready or not.
fn firewall(image: &str, first: bool, age: Duration, ready: bool) -> MetalStackFirewall {
    let c = wanting(image, None);
    let mut fw = plan_firewall(&c, "prod", spec(image), None);
    if !first {
        fw = super::super::rollout::rolled("prod", &fw);
    }
    let created = now() - jiff::SignedDuration::try_from(age).expect("age");
    fw.metadata.creation_timestamp = Some(Time(created));
    fw.spec.provider_id = Some(format!("metal://fra-equ01/{image}"));
    fw.status = Some(MetalStackFirewallStatus {
        ready,
        machine_id: Some(image.into()),
        ..Default::default()
    });
    let role = match (ready, first) {
        (true, _) => Role::Serving,
        (false, true) => Role::Provisioning,
        (false, false) => Role::RollingIn,
    };
    with_role(fw, role)
}

fn seen(firewalls: Vec<MetalStackFirewall>) -> Stages {
    Stages {
        firewall: Some(FirewallSeen {
            firewalls,
            now: now(),
            rollout_deadline: DEADLINE,
            ..Default::default()
        }),
        ..provisioned()
    }
}

fn rollout(d: &ClusterDecision) -> FirewallRolloutStatus {
    d.status.firewall.clone().expect("rollout status")
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn a_changed_spec_rolls_in_a_new_firewall_while_the_old_one_serves() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let d = run(&wanting("fw-2", None), seen(vec![old.clone()]));
    let ClusterStep::RollInFirewall(new) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(new.spec.image, "fw-2");
    assert_eq!(new.spec.provider_id, None, "a machine of its own");
    assert!(new.name_any().starts_with("prod-firewall-"));
    let role = |fw: &MetalStackFirewall| fw.labels().get(FIREWALL_ROLE_LABEL).cloned();
    assert_eq!(role(new).as_deref(), Some("RollingIn"));
    assert!(d.status.ready, "the cluster stays ready");
    assert_eq!(condition(&d, Type::Ready).0, "True");
    assert_eq!(condition(&d, Type::FirewallReady).0, "True");
    assert_eq!(condition(&d, Type::FirewallRolledOut).1, "RollingOut");
    let status = rollout(&d);
    assert_eq!(status.serving.as_deref(), Some("prod-firewall"));
    assert_eq!(status.rolling_in, new.metadata.name);
    assert_eq!(status.phase, RolloutPhase::RollingOut);

    // Killed and restarted: the same firewall, by name, not a second one.
    let again = run(&wanting("fw-2", None), seen(vec![old.clone()]));
    assert!(
        matches!(&again.step, ClusterStep::RollInFirewall(fw) if fw.metadata.name == new.metadata.name)
    );

    // Created, not ready yet: wait, with the new firewall's own words.
    let rolling = firewall("fw-2", false, MINUTE, false);
    let d = run(
        &wanting("fw-2", None),
        seen(vec![old.clone(), rolling.clone()]),
    );
    assert!(matches!(d.step, ClusterStep::Nothing));
    assert!(d.status.ready);
    assert_eq!(condition(&d, Type::FirewallRolledOut).1, "RollingOut");
    assert!(matches!(next(&d), Requeue::After(t) if t <= MINUTE));

    // Ready: the old one goes; then the new one, serving alone, is labelled the one serving,
    // the cluster ready all along with the condition it keeps.
    let ready = firewall("fw-2", false, MINUTE * 2, true);
    let mut unlabelled = ready.clone();
    unlabelled
        .labels_mut()
        .insert(FIREWALL_ROLE_LABEL.into(), "RollingIn".into());
    let d = run(
        &wanting("fw-2", None),
        seen(vec![old.clone(), unlabelled.clone()]),
    );
    assert!(
        matches!(&d.step, ClusterStep::RetireFirewall(n, Retire::Replaced) if n == "prod-firewall")
    );
    assert_eq!(rollout(&d).serving, ready.metadata.name);
    let d = run(&wanting("fw-2", None), seen(vec![unlabelled]));
    assert!(
        matches!(&d.step, ClusterStep::RelabelFirewall { name, labels, .. } if Some(name) == ready.metadata.name.as_ref() && labels.get(FIREWALL_ROLE_LABEL).map(String::as_str) == Some("Serving")),
        "{:?}",
        d.step
    );
    assert!(d.status.ready);
    let message = condition(&d, Type::FirewallReady).2;
    assert_eq!(
        message,
        format!("MetalStackFirewall {} is ready", ready.name_any())
    );
    let d = run(&wanting("fw-2", None), seen(vec![ready.clone()]));
    assert!(matches!(d.step, ClusterStep::Nothing));
    assert_eq!(condition(&d, Type::FirewallRolledOut).0, "True");
    assert_eq!(rollout(&d).phase, RolloutPhase::Stable);
    assert_eq!(rollout(&d).serving, ready.metadata.name);
    assert_eq!(condition(&d, Type::FirewallReady).2, message);
}

#[test]
fn a_firewall_not_ready_by_the_deadline_is_freed_and_the_old_one_keeps_serving() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let late = firewall("fw-2", false, DEADLINE + MINUTE, false);
    let d = run(
        &wanting("fw-2", None),
        seen(vec![old.clone(), late.clone()]),
    );
    let ClusterStep::RetireFirewall(name, Retire::Failed(why)) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(Some(name), late.metadata.name.as_ref());
    assert!(why.contains("did not become ready within 600s"), "{why}");
    assert!(d.status.ready, "the old firewall still serves");
    assert_eq!(condition(&d, Type::FirewallRolledOut).1, "RolloutFailed");
    let failed = rollout(&d);
    assert_eq!(
        (failed.phase, failed.failed_attempts),
        (RolloutPhase::Failed, 1)
    );
    assert_eq!(failed.serving.as_deref(), Some("prod-firewall"));

    // Freed: wait out the backoff, then try again.
    let d = run(
        &wanting("fw-2", Some(failed.clone())),
        seen(vec![old.clone()]),
    );
    assert!(matches!(d.step, ClusterStep::Nothing));
    assert!(matches!(next(&d), Requeue::After(t) if t <= backoff(1)));
    assert!(
        condition(&d, Type::FirewallRolledOut)
            .2
            .contains("attempt 1 of 5 failed")
    );
    let mut waited = failed.clone();
    waited.last_failure_time = Some(Time(now() - jiff::SignedDuration::from_mins(2)));
    let d = run(&wanting("fw-2", Some(waited)), seen(vec![old.clone()]));
    assert!(
        matches!(d.step, ClusterStep::RollInFirewall(_)),
        "{:?}",
        d.step
    );

    // After the last attempt capms waits for the next change of the spec.
    let mut exhausted = failed.clone();
    exhausted.failed_attempts = MAX_ATTEMPTS;
    exhausted.last_failure_time = Some(Time(now() - jiff::SignedDuration::from_hours(5)));
    let d = run(
        &wanting("fw-2", Some(exhausted.clone())),
        seen(vec![old.clone()]),
    );
    assert!(matches!(d.step, ClusterStep::Nothing));
    assert_eq!(
        next(&d),
        Requeue::Resync,
        "looked at again within the sync period"
    );
    assert!(condition(&d, Type::FirewallRolledOut).2.contains("gave up"));
    // A different spec starts afresh.
    let d = run(&wanting("fw-3", Some(exhausted)), seen(vec![old]));
    assert!(matches!(d.step, ClusterStep::RollInFirewall(_)));
}

#[test]
fn a_further_change_supersedes_the_firewall_rolling_in_never_the_serving_one() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let rolling = firewall("fw-2", false, MINUTE, false);
    let d = run(
        &wanting("fw-3", None),
        seen(vec![old.clone(), rolling.clone()]),
    );
    assert!(
        matches!(&d.step, ClusterStep::RetireFirewall(n, Retire::Superseded) if Some(n) == rolling.metadata.name.as_ref()),
        "{:?}",
        d.step
    );
    assert!(d.status.ready);
    let d = run(&wanting("fw-3", None), seen(vec![old]));
    assert!(matches!(&d.step, ClusterStep::RollInFirewall(fw) if fw.spec.image == "fw-3"));
}

#[test]
fn a_lost_firewall_is_replaced_by_the_new_spec_and_goes_once_that_is_ready() {
    let lost = firewall("fw-1", true, MINUTE * 60, false);
    let d = run(&wanting("fw-2", None), seen(vec![lost.clone()]));
    let ClusterStep::CreateFirewall(new) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert!(
        new.name_any().starts_with("prod-firewall-"),
        "not the lost one's name"
    );
    let ready = firewall("fw-2", false, MINUTE, true);
    let d = run(&wanting("fw-2", None), seen(vec![lost, ready]));
    assert!(
        matches!(&d.step, ClusterStep::RetireFirewall(n, Retire::Replaced) if n == "prod-firewall")
    );
}

#[test]
fn rolled_names_follow_the_spec_and_wait_for_a_namesake_being_deleted() {
    let a = firewall("fw-2", false, MINUTE, false);
    let b = firewall("fw-2", false, MINUTE * 9, true);
    let c = firewall("fw-3", false, MINUTE, false);
    assert_eq!(a.metadata.name, b.metadata.name);
    assert_ne!(a.metadata.name, c.metadata.name);
    assert_eq!(a.name_any(), rolled_name("prod", &a));
    // The first firewall is named after the cluster; a deleted (lost) one comes back under
    // that name once it is gone.
    let d = run(&wanting("fw-1", None), seen(vec![]));
    assert!(matches!(&d.step, ClusterStep::CreateFirewall(fw) if fw.name_any() == "prod-firewall"));
    let mut deleting = firewall("fw-1", true, MINUTE, false);
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let d = run(&wanting("fw-1", None), seen(vec![deleting]));
    assert!(matches!(d.step, ClusterStep::Nothing), "{:?}", d.step);
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let mut namesake = a;
    namesake.metadata.deletion_timestamp = Some(Time(now()));
    let d = run(&wanting("fw-2", None), seen(vec![old, namesake]));
    assert!(matches!(d.step, ClusterStep::Nothing), "{:?}", d.step);
    assert!(d.status.ready);
}

#[test]
fn while_nothing_serves_one_rolled_firewall_at_a_time() {
    // The first firewall is still booting; the spec changes twice.
    let booting = firewall("fw-1", true, MINUTE, false);
    let d = run(&wanting("fw-2", None), seen(vec![booting.clone()]));
    assert!(matches!(&d.step, ClusterStep::CreateFirewall(fw) if fw.spec.image == "fw-2"));
    let rolling = firewall("fw-2", false, MINUTE, false);
    let d = run(
        &wanting("fw-3", None),
        seen(vec![booting.clone(), rolling.clone()]),
    );
    assert!(
        matches!(&d.step, ClusterStep::RetireFirewall(n, Retire::Superseded) if Some(n) == rolling.metadata.name.as_ref()),
        "the earlier roll-in goes before another is made: {:?}",
        d.step
    );
}

#[test]
fn new_labels_are_patched_in_place_not_rolled() {
    let mut serving = firewall("fw-1", true, MINUTE * 60, true);
    if let Some(labels) = serving.metadata.labels.as_mut() {
        labels.clear();
    }
    let d = run(&wanting("fw-1", None), seen(vec![serving]));
    let ClusterStep::RelabelFirewall { name, labels, .. } = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(name, "prod-firewall");
    assert!(labels.contains_key(CLUSTER_NAME_LABEL));
    assert!(d.status.ready, "it serves meanwhile");
}

#[test]
fn of_two_firewalls_with_the_current_spec_the_ready_one_serves() {
    let rolled_in = firewall("fw-1", false, MINUTE, false);
    let first = firewall("fw-1", true, MINUTE * 60, true);
    let d = run(&wanting("fw-1", None), seen(vec![rolled_in.clone(), first]));
    assert!(
        matches!(&d.step, ClusterStep::RetireFirewall(n, Retire::Replaced) if Some(n) == rolled_in.metadata.name.as_ref()),
        "{:?}",
        d.step
    );
    assert!(d.status.ready);
}

#[test]
fn a_failed_firewall_seen_again_is_counted_once() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let late = firewall("fw-2", false, DEADLINE + MINUTE, false);
    let d = run(
        &wanting("fw-2", None),
        seen(vec![old.clone(), late.clone()]),
    );
    let once = rollout(&d);
    assert_eq!(once.failed_attempts, 1);
    // Its deletion failed, or the cache has not caught up: the same firewall again.
    let d = run(&wanting("fw-2", Some(once)), seen(vec![old, late]));
    assert!(matches!(
        d.step,
        ClusterStep::RetireFirewall(_, Retire::Failed(_))
    ));
    assert_eq!(rollout(&d).failed_attempts, 1);
}

#[test]
fn while_the_failed_firewall_is_deleted_the_rollout_still_says_it_failed() {
    let old = firewall("fw-1", true, MINUTE * 60, true);
    let late = firewall("fw-2", false, DEADLINE + MINUTE, false);
    let d = run(
        &wanting("fw-2", None),
        seen(vec![old.clone(), late.clone()]),
    );
    let failed = rollout(&d);
    let mut deleting = late;
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let d = run(&wanting("fw-2", Some(failed)), seen(vec![old, deleting]));
    assert!(matches!(d.step, ClusterStep::Nothing));
    assert_eq!(rollout(&d).phase, RolloutPhase::Failed);
    assert_eq!(condition(&d, Type::FirewallRolledOut).1, "RolloutFailed");
}

mod timing;
