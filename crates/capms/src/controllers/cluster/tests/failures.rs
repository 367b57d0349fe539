//! The status after a failure, and while provisioning, of a cluster that was ready before and of
//! one that was not.

use super::*;
use crate::api::{Initialization, MetalStackClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

fn unreachable() -> Error {
    Error::Metal(metal_api::Error::Api {
        endpoint: "network find",
        status: 503,
        message: "down".into(),
    })
}

fn status(ready: bool, done: &[(Type, &str)]) -> MetalStackClusterStatus {
    MetalStackClusterStatus {
        ready,
        initialization: Some(Initialization {
            provisioned: Some(true),
        }),
        conditions: done
            .iter()
            .map(|(type_, status)| Condition {
                type_: type_.as_str().into(),
                status: (*status).into(),
                reason: "R".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            })
            .collect(),
        ..Default::default()
    }
}

fn status_of(status: &MetalStackClusterStatus, type_: Type) -> Option<(String, String)> {
    find(&status.conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

#[test]
fn a_failure_keeps_a_ready_clusters_initialization_and_clears_another_s() {
    let failed = |ready| after_failure(&msc(), status(ready, &[]), &unreachable(), None);
    let was_ready = failed(true);
    assert!(
        was_ready.initialization.is_some(),
        "provisioned stays provisioned"
    );
    assert!(failed(false).initialization.is_none());
}

/// A failure met while observing concerns the first step not done yet: the network, else the
/// control-plane IP, else neither.
#[test]
fn a_failure_while_observing_is_filed_under_the_first_step_not_done() {
    let reason = "MetalServerError";
    let observe =
        |done: &[(Type, &str)]| after_failure(&msc(), status(false, done), &unreachable(), None);
    let none = observe(&[]);
    assert_eq!(
        status_of(&none, Type::NetworkReady),
        Some(("False".into(), reason.into()))
    );
    assert_eq!(status_of(&none, Type::ControlPlaneIpReady), None);

    let network_failing = observe(&[(Type::NetworkReady, "False")]);
    assert_eq!(
        status_of(&network_failing, Type::NetworkReady).map(|s| s.1),
        Some(reason.into())
    );

    let network_done = observe(&[(Type::NetworkReady, "True")]);
    assert_eq!(
        status_of(&network_done, Type::NetworkReady),
        Some(("True".into(), "R".into()))
    );
    assert_eq!(
        status_of(&network_done, Type::ControlPlaneIpReady),
        Some(("False".into(), reason.into()))
    );

    let ip_failing = observe(&[
        (Type::NetworkReady, "True"),
        (Type::ControlPlaneIpReady, "False"),
    ]);
    assert_eq!(
        status_of(&ip_failing, Type::ControlPlaneIpReady).map(|s| s.1),
        Some(reason.into())
    );

    let both_done = observe(&[
        (Type::NetworkReady, "True"),
        (Type::ControlPlaneIpReady, "True"),
    ]);
    assert_eq!(
        status_of(&both_done, Type::NetworkReady).map(|s| s.0),
        Some("True".into())
    );
    assert_eq!(
        status_of(&both_done, Type::ControlPlaneIpReady).map(|s| s.0),
        Some("True".into())
    );
    assert_eq!(
        status_of(&both_done, Type::Ready),
        Some(("False".into(), reason.into()))
    );
}

#[test]
fn a_failed_step_is_filed_under_its_own_condition_only() {
    let reason = "MetalServerError";
    let failed =
        |step: ClusterStep| after_failure(&msc(), status(false, &[]), &unreachable(), Some(&step));
    let network = failed(ClusterStep::AllocateNetwork(Box::default()));
    assert_eq!(
        status_of(&network, Type::NetworkReady).map(|s| s.1),
        Some(reason.into())
    );
    let reserve = failed(ClusterStep::ReserveIp(IP.into(), Box::default()));
    assert_eq!(
        status_of(&reserve, Type::ControlPlaneIpReady).map(|s| s.1),
        Some(reason.into())
    );
    let other = failed(ClusterStep::FreeNetwork("net-1".into()));
    assert_eq!(status_of(&other, Type::NetworkReady), None);
    assert_eq!(status_of(&other, Type::ControlPlaneIpReady), None);
}

#[test]
fn a_ready_cluster_taking_a_step_stays_provisioned_and_a_new_one_does_not_claim_to_be() {
    // A ready cluster whose firewall rolls: a step, and Ready's message says provisioning.
    let mut ready = msc();
    ready.status = Some(status(true, &[]));
    let new = msc();
    for (msc, provisioned) in [(ready, true), (new, false)] {
        let d = run(&msc, live(NetworkSeen::Unallocated, allocate()));
        assert!(
            matches!(d.step, ClusterStep::AllocateNetwork(_)),
            "{:?}",
            d.step
        );
        assert_eq!(
            d.status.initialization.is_some(),
            provisioned,
            "{:?}",
            d.status
        );
    }
}
