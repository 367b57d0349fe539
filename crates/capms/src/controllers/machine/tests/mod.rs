//! `decide` for MetalStackMachines: every gate, every step and every failure, without I/O.

use super::decide::*;
use super::model::*;
use super::*;
use crate::api::{
    Initialization, MachineAddressType, MetalStackClusterSpec, MetalStackClusterStatus,
    MetalStackMachineSpec,
};
use crate::api::{MetalStackCluster, MetalStackMachine};
use crate::capi::Machine as CapiMachine;
use crate::capi::{Bootstrap, MachineSpec};
use crate::controllers::allocation::Found;
use crate::controllers::allocation::Lost;
use crate::reconciler::Requeue;
use crate::reconciler::conditions::Type;
use crate::reconciler::handoffs::{HANDOFF_TIMEOUT, Handoff};
use crate::reconciler::{Category, Error};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use metal_api::types::{
    Machine, MachineAllocation, MachineEvent, MachineNetwork, event, liveliness,
};

const ID: &str = "e0ab02d2-27cd-5a5e-8efc-080ba80cf258";

fn msm() -> MetalStackMachine {
    let mut m = MetalStackMachine::new(
        "worker-0",
        MetalStackMachineSpec {
            image: "ubuntu-24.04".into(),
            machine_type: "v1-small-x86".into(),
            ..Default::default()
        },
    );
    m.metadata.namespace = Some("team-a".into());
    m.metadata.uid = Some("uid-m".into());
    m.metadata.generation = Some(3);
    m.metadata.finalizers = Some(vec![FINALIZER.into()]);
    m.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        name: "m-0".into(),
        uid: "uid-capi".into(),
        ..Default::default()
    }]);
    m
}

fn capi_machine(secret: Option<&str>) -> CapiMachine {
    CapiMachine::new(
        "m-0",
        MachineSpec {
            cluster_name: "prod".into(),
            bootstrap: Bootstrap {
                data_secret_name: secret.map(str::to_owned),
            },
            ..Default::default()
        },
    )
}

fn infrastructure(provisioned: bool) -> MetalStackCluster {
    let mut msc = MetalStackCluster::new(
        "prod",
        MetalStackClusterSpec {
            partition: "fra-equ01".into(),
            project_id: "0c1cdc4a-0000-4000-8000-000000000001".into(),
            ..Default::default()
        },
    );
    msc.metadata.namespace = Some("team-a".into());
    msc.status = Some(MetalStackClusterStatus {
        network_id: Some("net-1".into()),
        initialization: Some(Initialization {
            provisioned: Some(provisioned),
        }),
        ..Default::default()
    });
    msc
}

/// Every gate open: everything observed up to allocation.
fn open(found: Found) -> MachineInputs {
    MachineInputs {
        machine: capi_machine(Some("bootstrap")),
        msc: infrastructure(true),
        network: "net-1".into(),
        found,
        user_data: Some("#cloud-config\nhostname: node-1\n".into()),
        rack_candidates: None,
        held: None,
        handoff: Handoff::Admitted,
    }
}

fn live(found: Found) -> Live {
    at_gate(MachineGate::Open(Box::new(open(found))))
}

/// Observed at `gate`, at the epoch.
fn at_gate(gate: MachineGate) -> Live {
    Live {
        now: jiff::Timestamp::UNIX_EPOCH,
        gate,
    }
}

fn metal_machine(last: &str) -> Machine {
    let mut m = Machine {
        id: ID.into(),
        rackid: "rack-1".into(),
        liveliness: liveliness::ALIVE.into(),
        allocation: Some(MachineAllocation {
            hostname: "node-1".into(),
            networks: vec![MachineNetwork {
                networktype: "privateprimaryunshared".into(),
                ips: vec!["127.16.0.1".into()],
                asn: 4200000001,
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    m.events.log.push(MachineEvent {
        event: last.into(),
        ..Default::default()
    });
    m
}

fn ours(last: &str) -> Found {
    Found::Ours(std::sync::Arc::new(metal_machine(last)))
}

fn run(msm: &MetalStackMachine, observed: Observed) -> MachineDecision {
    decide(msm, &observed)
}

/// `msm()` named after its machine, as the Record patch leaves it.
fn named() -> MetalStackMachine {
    let mut named = msm();
    named.spec.provider_id = Some(format!("metal://fra-equ01/{ID}"));
    named.metadata.labels = Some(
        [
            (RACK_LABEL.to_owned(), "rack-1".to_owned()),
            (ASN_LABEL.to_owned(), "4200000001".to_owned()),
        ]
        .into(),
    );
    named
}

fn live_run(msm: &MetalStackMachine, live: Live) -> MachineDecision {
    run(msm, Observed::Live(Box::new(live)))
}

fn ready_reason(d: &MachineDecision) -> (&str, &str) {
    let c = crate::reconciler::conditions::find(&d.status.conditions, Type::Ready)
        .expect("a Ready condition");
    (c.status.as_str(), c.reason.as_str())
}

fn condition(d: &MachineDecision, type_: Type) -> (&str, &str, &str) {
    let c =
        crate::reconciler::conditions::find(&d.status.conditions, type_).expect("the condition");
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

fn requeue(d: &MachineDecision) -> Requeue {
    *d.next.as_ref().expect("no error")
}

mod allocated;
mod facts;
mod machine_set;
mod placement;

#[test]
fn an_externally_managed_machine_is_left_alone() {
    let d = run(&msm(), Observed::Unmanaged);
    assert_eq!(d.step, MachineStep::Nothing);
    assert_eq!(requeue(&d), Requeue::AwaitChange);
    assert!(d.status.conditions.is_empty());
}

#[test]
fn deletion_frees_one_machine_at_a_time_then_lets_go() {
    let mut m = msm();
    m.status = Some(MetalStackMachineStatus {
        ready: true,
        initialization: Some(Initialization {
            provisioned: Some(true),
        }),
        ..Default::default()
    });
    let d = run(
        &m,
        Observed::Deleting(Some(vec![ID.into(), "other".into()])),
    );
    assert_eq!(d.step, MachineStep::Free(ID.into()));
    assert_eq!(requeue(&d), Requeue::Now);
    assert!(!d.status.ready && d.status.initialization.is_none());
    assert_eq!(ready_reason(&d), ("False", "Deleting"));
    let d = run(&m, Observed::Deleting(Some(vec![])));
    assert_eq!(d.step, MachineStep::RemoveFinalizer);
    assert_eq!(requeue(&d), Requeue::AwaitChange);
    let d = run(&m, Observed::Deleting(None));
    assert_eq!(d.step, MachineStep::Nothing);
    assert_eq!(
        d.status,
        m.status.clone().unwrap_or_default(),
        "nothing to report"
    );
}

#[test]
fn nothing_is_written_before_the_owning_machine_exists() {
    let mut orphan = msm();
    orphan.metadata.owner_references = None;
    let d = live_run(&orphan, at_gate(MachineGate::NoOwner));
    assert_eq!(d.step, MachineStep::Nothing);
    assert_eq!(d.status, MetalStackMachineStatus::default(), "no status");
    assert_eq!(
        requeue(&d),
        Requeue::AwaitChange,
        "the owner reference wakes it"
    );

    let d = live_run(&msm(), at_gate(MachineGate::NoMachine));
    assert_eq!(d.step, MachineStep::Nothing);
    assert_eq!(d.status, MetalStackMachineStatus::default(), "no status");
    assert_eq!(
        requeue(&d),
        Requeue::After(std::time::Duration::from_secs(10))
    );
}

#[test]
fn a_new_objects_short_wait_is_not_written_and_a_lasting_one_is() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::time::Duration;
    let created = jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_hours(1);
    let mut fresh = msm();
    fresh.metadata.creation_timestamp = Some(Time(created));
    let at = |seconds: u64| Live {
        now: created + Duration::from_secs(seconds),
        gate: MachineGate::NoInfrastructure {
            machine: capi_machine(Some("bootstrap")),
        },
    };
    let d = live_run(&fresh, at(5));
    assert_eq!(d.step, MachineStep::Nothing);
    assert_eq!(
        d.status,
        fresh.status.clone().unwrap_or_default(),
        "nothing written"
    );
    assert_eq!(requeue(&d), Requeue::Poll, "the gate's own look");

    let d = live_run(&fresh, at(UNREPORTED_WAIT.as_secs()));
    assert_eq!(
        ready_reason(&d),
        ("False", "WaitingForClusterInfrastructure")
    );
    assert_eq!(requeue(&d), Requeue::Poll);

    let mut reported = fresh.clone();
    reported.status = Some(d.status.clone());
    let d = live_run(&reported, at(1));
    assert_eq!(
        ready_reason(&d),
        ("False", "WaitingForClusterInfrastructure"),
        "a Ready condition once written is kept true to what is awaited"
    );
}

#[test]
fn every_gate_names_what_it_waits_for() {
    let cases: Vec<(Live, &str, &str, Requeue)> = vec![
        (
            at_gate(MachineGate::NoCluster {
                machine: capi_machine(Some("bootstrap")),
            }),
            "WaitingForCluster",
            "Cluster team-a/prod does not exist (yet)",
            Requeue::After(std::time::Duration::from_secs(10)),
        ),
        (
            at_gate(MachineGate::NoInfrastructure {
                machine: capi_machine(Some("bootstrap")),
            }),
            "WaitingForClusterInfrastructure",
            "MetalStackCluster of Cluster prod to be provisioned",
            Requeue::Poll,
        ),
        (
            at_gate(MachineGate::NoBootstrapSecret {
                machine: capi_machine(None),
            }),
            "WaitingForBootstrapData",
            "spec.bootstrap.dataSecretName",
            Requeue::Poll,
        ),
        (
            at_gate(MachineGate::Open(Box::new(MachineInputs {
                user_data: None,
                ..open(Found::Nothing)
            }))),
            "WaitingForBootstrapData",
            "bootstrap Secret team-a/bootstrap does not exist or has no key \"value\"",
            Requeue::Poll,
        ),
    ];
    for (observed, reason, message, wait) in cases {
        let d = live_run(&msm(), observed);
        assert_eq!(d.step, MachineStep::Nothing, "{reason}");
        assert_eq!(ready_reason(&d), ("False", reason));
        let (_, _, said) = condition(&d, Type::Ready);
        assert!(said.contains(message), "{said:?} should say {message:?}");
        assert_eq!(requeue(&d), wait, "{reason}");
        assert!(!d.status.ready);
    }
}

#[test]
fn a_pause_stops_before_any_write_and_is_reported() {
    let why = "Cluster spec.paused is true";
    let d = live_run(&named(), at_gate(MachineGate::Paused(why.into())));
    assert_eq!(d.step, MachineStep::Nothing);
    assert_eq!(condition(&d, Type::Paused), ("True", "Paused", why));
    assert_eq!(requeue(&d), Requeue::AwaitChange);
    assert!(!d.status.ready, "nothing else is reported");
    let d = live_run(&named(), live(ours(event::PHONED_HOME)));
    assert_eq!(condition(&d, Type::Paused), ("False", "NotPaused", ""));
}

#[test]
fn the_finalizer_is_written_with_the_machine_s_name_not_before_it() {
    let mut fresh = msm();
    fresh.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    fresh.metadata.resource_version = Some("41".into());
    let d = live_run(&fresh, live(Found::Nothing));
    assert!(
        matches!(d.step, MachineStep::Allocate(_)),
        "allocated without a write before it: {:?}",
        d.step
    );
    let d = live_run(&fresh, live(ours(event::PHONED_HOME)));
    let MachineStep::Record(patch) = &d.step else {
        panic!("expected the patch naming the machine, got {:?}", d.step)
    };
    assert_eq!(
        patch["metadata"]["finalizers"],
        serde_json::json!(["example.com/hold", FINALIZER]),
        "another's finalizer kept"
    );
    assert_eq!(
        patch["metadata"]["resourceVersion"], "41",
        "the list replaced whole only as it was read"
    );
    assert_eq!(
        patch["spec"]["providerID"],
        format!("metal://fra-equ01/{ID}")
    );

    // Named already (a restore that brought it back without its finalizer): the finalizer alone.
    let mut restored = named();
    restored.metadata.finalizers = None;
    let d = live_run(&restored, live(ours(event::PHONED_HOME)));
    let MachineStep::Record(patch) = &d.step else {
        panic!("expected the finalizer patch, got {:?}", d.step)
    };
    assert_eq!(
        patch["metadata"]["finalizers"],
        serde_json::json!([FINALIZER])
    );
    assert!(patch.get("spec").is_none(), "nothing else: {patch}");
}

#[test]
fn nothing_is_taken_up_or_allocated_for_a_machine_being_deleted() {
    let mut machine = capi_machine(Some("bootstrap"));
    machine.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
    );
    let deleting = |found: Found| {
        let machine = machine.clone();
        at_gate(MachineGate::Open(Box::new(MachineInputs {
            machine,
            ..open(found)
        })))
    };
    let mut fresh = msm();
    fresh.metadata.finalizers = None;
    for (obj, observed, what) in [
        (fresh, deleting(Found::Nothing), "no finalizer yet"),
        (msm(), deleting(Found::Nothing), "nothing allocated yet"),
    ] {
        let d = live_run(&obj, observed);
        assert_eq!(d.step, MachineStep::Nothing, "{what}");
        assert_eq!(requeue(&d), Requeue::AwaitChange, "{what}");
        let allocated =
            crate::reconciler::conditions::find(&d.status.conditions, Type::MachineAllocated);
        assert!(allocated.is_none(), "{what}");
    }
    let d = live_run(&named(), deleting(ours(event::PHONED_HOME)));
    assert!(d.status.ready, "an allocated machine is still reported");
}

#[test]
fn a_free_slot_is_allocated_with_everything_the_machine_needs() {
    let d = live_run(&msm(), live(Found::Nothing));
    let MachineStep::Allocate(request) = &d.step else {
        panic!("expected an allocation, got {:?}", d.step)
    };
    assert_eq!(
        requeue(&d),
        Requeue::Now,
        "the next reconcile observes the allocation"
    );
    assert!(
        crate::reconciler::conditions::find(&d.status.conditions, Type::MachineAllocated).is_none(),
        "the allocation's outcome is written, not that it is under way"
    );
    assert_eq!(request.hostname, "node-1", "from the cloud-config");
    assert_eq!(request.partitionid, "fra-equ01", "the cluster's partition");
    assert_eq!(request.uuid, None, "any free machine of the size");
    assert_eq!(
        request.networks.as_ref().map(|n| n[0].networkid.as_str()),
        Some("net-1")
    );
    for tag in [
        "metal-stack.infrastructure.cluster.x-k8s.io/machine-resource=team-a.worker-0",
        "metal-stack.infrastructure.cluster.x-k8s.io/machine-uid=uid-m",
        "cluster.metal-stack.io/id=team-a.prod",
        "metal-stack.infrastructure.cluster.x-k8s.io/purpose=worker",
    ] {
        assert!(
            request.tags.iter().any(|t| t == tag),
            "{tag} in {:?}",
            request.tags
        );
    }
    assert!(request.placement_tags.is_empty(), "workers are not spread");

    let mut machine = capi_machine(Some("bootstrap"));
    machine.metadata.labels =
        Some([(crate::capi::CONTROL_PLANE_LABEL.to_owned(), String::new())].into());
    let control_plane = at_gate(MachineGate::Open(Box::new(MachineInputs {
        machine,
        ..open(Found::Nothing)
    })));
    let mut own_partition = msm();
    own_partition.spec.partition = Some("nbg-w8101".into());
    own_partition.spec.provider_id = Some(format!("metalstack://{ID}"));
    let d = live_run(&own_partition, control_plane);
    let MachineStep::Allocate(request) = &d.step else {
        panic!("expected an allocation, got {:?}", d.step)
    };
    assert_eq!(request.partitionid, "nbg-w8101");
    assert_eq!(request.uuid.as_deref(), Some(ID), "the preset machine");
    assert_eq!(
        request.placement_tags,
        [
            "cluster.metal-stack.io/id=team-a.prod",
            "metal-stack.infrastructure.cluster.x-k8s.io/purpose=control-plane"
        ]
    );
}

#[test]
fn an_unusable_provider_id_fails_naming_the_field() {
    let mut malformed = msm();
    malformed.spec.provider_id = Some("metal:/nothing".into());
    let taken = Found::PresetTaken {
        id: ID.into(),
        name: "other".into(),
        project: "p".into(),
    };
    for (m, found) in [
        (malformed, Found::Nothing),
        (msm(), Found::PresetMissing(ID.into())),
        (msm(), taken),
    ] {
        let d = live_run(&m, live(found));
        assert_eq!(d.step, MachineStep::Nothing, "nothing is allocated");
        let error = d.next.as_ref().expect_err("an error");
        assert_eq!(error.category(), Category::InvalidSpec);
        assert!(error.to_string().starts_with("spec.providerID"), "{error}");
        let (status, reason, message) = condition(&d, Type::MachineAllocated);
        assert_eq!((status, reason), ("False", "InvalidSpec"));
        assert_eq!(message, error.to_string());
    }
}
