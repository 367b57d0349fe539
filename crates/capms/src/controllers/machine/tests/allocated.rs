//! After allocation: readiness, health, the providerID and a machine lost outside capms.

use super::*;

#[test]
fn a_machine_is_named_first_and_its_status_written_after_that() {
    let d = live_run(&msm(), live(ours(event::PHONED_HOME)));
    let MachineStep::Record(patch) = &d.step else {
        panic!("expected the providerID patch, got {:?}", d.step)
    };
    assert_eq!(
        patch["spec"]["providerID"],
        format!("metal://fra-equ01/{ID}")
    );
    assert_eq!(patch["metadata"]["labels"][RACK_LABEL], "rack-1");
    assert_eq!(patch["metadata"]["labels"][ASN_LABEL], "4200000001");
    assert_eq!(
        requeue(&d),
        Requeue::Now,
        "the reconcile right after the spec change writes the status, its generation final"
    );
    // Shown only should naming the machine fail (the engine skips it otherwise): then the
    // object must not say ready without the providerID Cluster API takes from it.
    assert!(!d.status.ready && d.status.initialization.is_none());
    assert_eq!(ready_reason(&d), ("False", "Provisioning"));
    assert_eq!(
        condition(&d, Type::Ready).2,
        format!("machine {ID} has phoned home; naming it in spec.providerID")
    );
    assert_eq!(condition(&d, Type::MachineAllocated).1, "Allocated");

    let d = live_run(&named(), live(ours(event::PHONED_HOME)));
    assert_eq!(d.step, MachineStep::Nothing, "already named: no write");
    assert!(d.status.ready);
    assert_eq!(
        d.status.initialization.as_ref().and_then(|i| i.provisioned),
        Some(true)
    );
    assert_eq!(ready_reason(&d), ("True", "PhonedHome"));
    assert_eq!(condition(&d, Type::MachineHealthy).1, "PhonedHome");
    assert_eq!(requeue(&d), Requeue::Resync);
    assert_eq!(d.status.addresses[0].type_, MachineAddressType::InternalIp);
}

#[test]
fn a_preset_provider_id_is_kept_as_written() {
    let mut preset = msm();
    preset.spec.provider_id = Some(format!("metalstack://{ID}"));
    let d = live_run(&preset, live(ours(event::PHONED_HOME)));
    let MachineStep::Record(patch) = &d.step else {
        panic!("expected the label patch, got {:?}", d.step)
    };
    assert_eq!(patch["spec"]["providerID"], format!("metalstack://{ID}"));
}

#[test]
fn a_provisioning_machine_polls_and_a_provisioned_one_stays_provisioned() {
    // Not ready, it claims no initialization (even if a status said so).
    let mut claiming = named();
    claiming.status = Some(MetalStackMachineStatus {
        initialization: Some(Initialization {
            provisioned: Some(true),
        }),
        ..Default::default()
    });
    let d = live_run(&claiming, live(ours(event::INSTALLING)));
    assert!(!d.status.ready && d.status.initialization.is_none());
    assert_eq!(ready_reason(&d), ("False", "Provisioning"));
    assert_eq!(
        condition(&d, Type::Ready).2,
        format!("machine {ID} is provisioning")
    );
    assert_eq!(requeue(&d), Requeue::Booting);

    let mut installing = named();
    installing.status = Some(d.status.clone());
    let booting = live_run(&installing, live(ours(event::BOOTING_NEW_KERNEL)));
    assert_eq!(
        booting.status, d.status,
        "the status, each change of which wakes Cluster API's Machine controller, stays put while the machine provisions"
    );

    let mut provisioned = named();
    provisioned.status = Some(MetalStackMachineStatus {
        ready: true,
        initialization: Some(Initialization {
            provisioned: Some(true),
        }),
        ..Default::default()
    });
    let mut looping = metal_machine(event::PHONED_HOME);
    looping.events.crash_loop = true;
    let d = live_run(
        &provisioned,
        live(Found::Ours(std::sync::Arc::new(looping))),
    );
    assert!(d.status.ready, "Cluster API's provisioned flag is one-way");
    assert!(
        d.status.initialization.is_some(),
        "and so is its initialization"
    );
    assert_eq!(ready_reason(&d), ("False", "CrashLoop"));
    assert_eq!(condition(&d, Type::MachineHealthy).0, "False");
}

#[test]
fn a_failed_allocation_shows_in_the_conditions() {
    let error = Error::Metal(metal_api::Error::Api {
        endpoint: "machine allocate",
        status: 422,
        message: "no machine available".into(),
    });
    let initialized = |ready| MetalStackMachineStatus {
        ready,
        initialization: Some(Initialization {
            provisioned: Some(true),
        }),
        ..Default::default()
    };
    let status = after_failure(&msm(), initialized(false), &error);
    let allocated = crate::reconciler::conditions::find(&status.conditions, Type::MachineAllocated)
        .expect("MachineAllocated");
    assert_eq!(
        (allocated.status.as_str(), allocated.reason.as_str()),
        ("False", "NoMachineAvailable")
    );
    assert!(!status.ready && status.initialization.is_none());
    let provisioned = after_failure(&msm(), initialized(true), &error);
    assert!(
        provisioned.initialization.is_some(),
        "a provisioned machine stays provisioned"
    );
}

#[test]
fn a_lost_machine_is_reported_never_replaced() {
    let mut named = msm();
    named.spec.provider_id = Some(format!("metal://fra-equ01/{ID}"));
    for lost in [
        Lost::Freed(ID.into()),
        Lost::Deleted(ID.into()),
        Lost::Reassigned {
            id: ID.into(),
            name: "someone".into(),
        },
    ] {
        let d = live_run(&named, live(Found::Lost(lost)));
        assert_eq!(d.step, MachineStep::Nothing, "nothing is allocated");
        let (status, reason, message) = condition(&d, Type::Ready);
        assert_eq!((status, reason), ("False", "MachineLost"));
        assert!(
            message.contains(ID) && message.contains("delete its Machine"),
            "{message}"
        );
        assert_eq!(d.status.failure_reason.as_deref(), Some("UpdateError"));
        assert_eq!(d.status.failure_message.as_deref(), Some(message));
        assert_eq!(condition(&d, Type::MachineAllocated).1, "MachineLost");
    }
}

#[test]
fn a_machine_beyond_the_handoff_window_waits_unwritten_and_then_is_handed_over() {
    let beyond = |found: Found, msm: &MetalStackMachine| {
        let live = at_gate(MachineGate::Open(Box::new(MachineInputs {
            handoff: Handoff::Waiting,
            ..open(found)
        })));
        live_run(msm, live)
    };
    // Neither named nor reported ready: nothing written, looked at again by the window's
    // timeout at the latest (a place freed wakes it sooner).
    for obj in [msm(), named()] {
        let d = beyond(ours(event::PHONED_HOME), &obj);
        assert_eq!(d.step, MachineStep::Nothing);
        assert_eq!(
            d.status,
            obj.status.clone().unwrap_or_default(),
            "unwritten"
        );
        assert_eq!(requeue(&d), Requeue::After(HANDOFF_TIMEOUT));
    }
    // Given its place, it is named, then reported ready.
    let d = live_run(&msm(), live(ours(event::PHONED_HOME)));
    assert!(matches!(d.step, MachineStep::Record(_)), "{:?}", d.step);
    let d = live_run(&named(), live(ours(event::PHONED_HOME)));
    assert!(d.status.ready, "reported ready once admitted");
}
