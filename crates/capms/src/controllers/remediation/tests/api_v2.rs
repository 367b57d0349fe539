//! A remediation of a machine reached through metal-stack's API v2, which has no reinstall.

use super::{ID, hung, live, remediation, run};
use crate::api::remediation::RemediationPhase;
use crate::controllers::remediation::decide::GIVEN_UP_REASON;
use crate::controllers::remediation::model::{MetalFacts, RemediationStep};
use crate::reconciler::conditions::Type;
use serde_json::json;

fn through_v2() -> MetalFacts {
    MetalFacts {
        reinstallable: false,
        ..hung()
    }
}

#[test]
fn a_reinstall_through_api_v2_hands_the_machine_back_saying_why() {
    let msr = remediation(json!({"type": "Reinstall"}), Default::default());
    let d = run(&msr, live(false, through_v2(), 6));
    assert_eq!(d.status.phase, Some(RemediationPhase::Exhausted));
    assert_eq!(d.status.retry_count, 0, "no attempt made");
    let remediating = crate::reconciler::conditions::find(&d.status.conditions, Type::Remediating);
    let remediating = remediating.unwrap_or_else(|| panic!("{:?}", d.status.conditions));
    assert_eq!(
        (remediating.status.as_str(), remediating.reason.as_str()),
        ("False", "ReinstallUnavailable")
    );
    assert!(
        remediating.message.contains("API v2"),
        "{}",
        remediating.message
    );
    let RemediationStep::GiveUp(condition) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert!(
        condition.to_string().contains(GIVEN_UP_REASON),
        "{condition}"
    );
}

#[test]
fn a_power_cycle_through_api_v2_is_attempted_as_through_v1() {
    let msr = remediation(json!({}), Default::default());
    let d = run(&msr, live(false, through_v2(), 6));
    assert_eq!(d.status.phase, Some(RemediationPhase::Running));
    assert_eq!(d.status.retry_count, 1);
    let msr = remediation(json!({}), d.status);
    let d = run(&msr, live(false, through_v2(), 7));
    assert_eq!(d.step, RemediationStep::PowerCycle(ID.into()));
}
