//! A Machine naming a failure domain: a free machine of its size in that rack, or a wait that
//! names the valid racks; and the rack an allocated machine stands in, reported.

use super::*;
use crate::api::FailureDomain;
use metal_api::catalog::{AllocationSummary, IdOnly, MachineSummary};

fn candidate(id: &str, rack: &str, taken: bool) -> MachineSummary {
    MachineSummary {
        id: id.into(),
        partition: Some(IdOnly {
            id: "fra-equ01".into(),
        }),
        rackid: rack.into(),
        size: Some(IdOnly {
            id: "v1-small-x86".into(),
        }),
        allocation: taken.then(AllocationSummary::default),
        liveliness: liveliness::ALIVE.into(),
        ..Default::default()
    }
}

/// Every gate open, nothing allocated, the Machine placed in `rack` of a cluster reporting
/// rack-1 and rack-2.
fn placed_in(rack: &str, candidates: Vec<MachineSummary>) -> Live {
    let mut open = open(Found::Nothing);
    open.machine.spec.failure_domain = Some(rack.into());
    let status = open.msc.status.get_or_insert_with(Default::default);
    status.failure_domains = ["rack-1", "rack-2"]
        .iter()
        .map(|r| FailureDomain {
            name: (*r).into(),
            control_plane: Some(true),
            ..Default::default()
        })
        .collect();
    open.rack_candidates = Some(RackCandidates::Machines(candidates));
    at_gate(MachineGate::Open(Box::new(open)))
}

#[test]
fn a_machine_placed_in_a_rack_gets_a_free_machine_of_its_size_there() {
    let candidates = vec![
        candidate("m-1a", "rack-1", false),
        candidate("m-2a", "rack-2", true),
        candidate("m-2b", "rack-2", false),
    ];
    let d = live_run(&msm(), live(Found::Nothing));
    let MachineStep::Allocate(anywhere) = &d.step else {
        panic!("expected an allocation, got {:?}", d.step)
    };
    assert_eq!(
        anywhere.uuid, None,
        "no failure domain: metal-api places it"
    );

    let d = live_run(&msm(), placed_in("rack-2", candidates));
    let MachineStep::Allocate(request) = &d.step else {
        panic!("expected an allocation, got {:?}", d.step)
    };
    assert_eq!(
        request.uuid.as_deref(),
        Some("m-2b"),
        "the free one of rack-2"
    );
    assert_eq!(requeue(&d), Requeue::Now);
}

#[test]
fn a_rack_not_reported_or_without_a_free_machine_is_a_condition_and_nothing_is_allocated() {
    let candidates = vec![
        candidate("m-1a", "rack-1", false),
        candidate("m-2a", "rack-2", true),
        candidate("m-3a", "rack-3", false),
    ];
    let d = live_run(&msm(), placed_in("rack-3", candidates.clone()));
    assert_eq!(d.step, MachineStep::Nothing);
    let (status, reason, message) = condition(&d, Type::Ready);
    assert_eq!((status, reason), ("False", "FailureDomainNotReported"));
    assert!(
        message.contains("spec.failureDomain: \"rack-3\"")
            && message.contains("valid: rack-1, rack-2"),
        "{message}"
    );
    assert_eq!(requeue(&d), Requeue::Poll);

    let d = live_run(&msm(), placed_in("rack-2", candidates));
    assert_eq!(d.step, MachineStep::Nothing);
    let (status, reason, message) = condition(&d, Type::Ready);
    assert_eq!((status, reason), ("False", "NoMachineInFailureDomain"));
    assert!(
        message.contains("v1-small-x86 is free in rack rack-2")
            && message.contains("racks with one: rack-1, rack-3"),
        "{message}"
    );
}

#[test]
fn an_allocated_machine_reports_its_rack_as_its_failure_domain() {
    let d = live_run(&named(), live(ours(event::PHONED_HOME)));
    assert_eq!(d.status.failure_domain.as_deref(), Some("rack-1"));
}

#[test]
fn a_rack_on_api_v2_is_a_condition_saying_a_project_token_cannot_pin_and_nothing_is_allocated() {
    let mut placed = placed_in("rack-1", vec![candidate("m-1a", "rack-1", false)]);
    let MachineGate::Open(open) = &mut placed.gate else {
        panic!("an open gate")
    };
    open.rack_candidates = Some(RackCandidates::ProjectToken);
    let d = live_run(&msm(), placed);
    assert_eq!(d.step, MachineStep::Nothing);
    let (status, reason, message) = condition(&d, Type::Ready);
    assert_eq!((status, reason), ("False", "FailureDomainNotReported"));
    assert!(
        message.contains("spec.failureDomain: \"rack-1\"")
            && message.contains("project token (API v2)")
            && message.contains("valid: none"),
        "{message}"
    );
}
