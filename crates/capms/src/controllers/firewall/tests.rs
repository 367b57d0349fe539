//! `decide` for MetalStackFirewalls: every gate, every step and every failure, without I/O.

use super::decide::*;
use super::model::*;
use super::*;
use crate::api::{
    EgressRule, FirewallRules, MetalStackClusterSpec, MetalStackClusterStatus,
    MetalStackFirewallSpec,
};
use crate::api::{MetalStackCluster, MetalStackFirewall};
use crate::controllers::allocation::Found;
use crate::reconciler::Error;
use crate::reconciler::Requeue;
use crate::reconciler::conditions::Type;
use crate::reconciler::conditions::find;
use metal_api::types::{Machine, MachineAllocation, MachineEvent, event, liveliness};

const ID: &str = "e0ab02d2-27cd-5a5e-8efc-080ba80cf258";

fn firewall() -> MetalStackFirewall {
    let mut fw = MetalStackFirewall::new(
        "prod-firewall",
        MetalStackFirewallSpec {
            image: "firewall-ubuntu-3.0".into(),
            machine_type: "v1-small-x86".into(),
            networks: vec!["internet".into(), "mpls".into()],
            rules: Some(FirewallRules {
                egress: vec![EgressRule {
                    ports: vec![443],
                    to: vec!["0.0.0.0/0".into()],
                    comment: Some("allow https".into()),
                    ..Default::default()
                }],
                ingress: Vec::new(),
            }),
            ..Default::default()
        },
    );
    fw.metadata.namespace = Some("team-a".into());
    fw.metadata.uid = Some("uid-fw".into());
    fw.metadata.finalizers = Some(vec![FINALIZER.into()]);
    fw
}

fn infrastructure() -> MetalStackCluster {
    let mut msc = MetalStackCluster::new(
        "prod",
        MetalStackClusterSpec {
            partition: "fra-equ01".into(),
            project_id: "p".into(),
            public_network_id: Some("internet".into()),
            ..Default::default()
        },
    );
    msc.metadata.namespace = Some("team-a".into());
    msc.status = Some(MetalStackClusterStatus::default());
    msc
}

/// Every gate open.
fn live(found: Found) -> FirewallGate {
    FirewallGate::Open(Box::new(FirewallInputs {
        msc: infrastructure(),
        network: "net-1".into(),
        found,
    }))
}

fn ours(last: &str) -> Found {
    let mut m = Machine {
        id: ID.into(),
        liveliness: liveliness::ALIVE.into(),
        allocation: Some(MachineAllocation::default()),
        ..Default::default()
    };
    m.events.log.push(MachineEvent {
        event: last.into(),
        ..Default::default()
    });
    Found::Ours(std::sync::Arc::new(m))
}

fn run(fw: &MetalStackFirewall, live: FirewallGate) -> FirewallDecision {
    decide(fw, &Observed::Live(Box::new(live)))
}

fn condition(d: &FirewallDecision, type_: Type) -> (String, String) {
    let c = find(&d.status.conditions, type_).expect("the condition");
    (c.status.clone(), c.reason.clone())
}

fn reason(d: &FirewallDecision) -> String {
    condition(d, Type::Ready).1
}

#[test]
fn gates_wait_for_the_cluster_and_its_network() {
    let d = run(&firewall(), FirewallGate::NoCluster);
    assert_eq!(reason(&d), "WaitingForCluster");
    assert_eq!(
        d.next.ok(),
        Some(Requeue::After(std::time::Duration::from_secs(10)))
    );
    let cluster = "prod".to_owned();
    let d = run(&firewall(), FirewallGate::NoNetwork { cluster });
    assert_eq!(reason(&d), "WaitingForNetwork");
    assert_eq!(d.next.ok(), Some(Requeue::Poll));
}

#[test]
fn a_firewall_is_taken_up_in_the_write_that_names_its_machine() {
    let mut fresh = firewall();
    fresh.metadata.finalizers = None;
    fresh.metadata.resource_version = Some("7".into());
    let d = run(&fresh, live(Found::Nothing));
    assert!(matches!(d.step, FirewallStep::Allocate(_)), "{:?}", d.step);
    let d = run(&fresh, live(ours(event::PHONED_HOME)));
    let providerid = format!("metal://fra-equ01/{ID}");
    assert_eq!(
        d.step,
        FirewallStep::Record(serde_json::json!({
            "metadata": {"finalizers": [FINALIZER], "resourceVersion": "7"},
            "spec": {"providerID": providerid},
        }))
    );
    fresh.spec.provider_id = Some(providerid);
    let d = run(&fresh, live(ours(event::PHONED_HOME)));
    assert_eq!(
        d.step,
        FirewallStep::Record(serde_json::json!({
            "metadata": {"finalizers": [FINALIZER], "resourceVersion": "7"},
        })),
        "a preset providerID is kept; the finalizer is still written"
    );
}

#[test]
fn a_paused_cluster_pauses_its_firewall() {
    let why = "Cluster spec.paused is true".to_owned();
    let d = run(&firewall(), FirewallGate::Paused(why));
    assert_eq!(d.step, FirewallStep::Nothing);
    assert_eq!(condition(&d, Type::Paused).0, "True");
}

#[test]
fn the_allocation_carries_both_cluster_networks_the_extra_ones_and_the_rules() {
    let d = run(&firewall(), live(Found::Nothing));
    let FirewallStep::Allocate(request) = &d.step else {
        panic!("expected an allocation, got {:?}", d.step)
    };
    assert_eq!(d.next.as_ref().ok(), Some(&Requeue::Now));
    assert_eq!(condition(&d, Type::FirewallAllocated).1, "Allocating");
    let networks: Vec<_> = request
        .machine
        .networks
        .iter()
        .flatten()
        .map(|n| n.networkid.as_str())
        .collect();
    assert_eq!(networks, ["net-1", "internet", "mpls"], "no network twice");
    let rules = request.firewall_rules.as_ref().expect("rules");
    assert_eq!(rules.egress[0].protocol, "tcp", "the default protocol");
    assert_eq!(rules.egress[0].comment, "allow https");
    assert!(
        request
            .machine
            .tags
            .contains(&"cluster.metal-stack.io/id=team-a.prod".to_owned())
    );
    assert!(
        request
            .machine
            .tags
            .contains(&"firewall.metal-stack.io/managed-by=capms".to_owned())
    );
    assert_eq!(request.machine.partitionid, "fra-equ01");
}

#[test]
fn an_allocated_firewall_is_ready_only_while_healthy() {
    let d = run(&firewall(), live(ours(event::PHONED_HOME)));
    assert!(d.status.ready);
    assert_eq!(d.status.machine_id.as_deref(), Some(ID));
    assert_eq!(reason(&d), "PhonedHome");
    assert_eq!(d.next.as_ref().ok(), Some(&Requeue::Resync));
    assert_eq!(
        d.step,
        FirewallStep::Record(
            serde_json::json!({"spec": {"providerID": format!("metal://fra-equ01/{ID}")}})
        )
    );
    let mut named = firewall();
    named.spec.provider_id = Some(format!("metal://fra-equ01/{ID}"));
    named.status = Some(d.status.clone());
    let Found::Ours(mut looping) = ours(event::PHONED_HOME) else {
        unreachable!()
    };
    std::sync::Arc::make_mut(&mut looping).events.crash_loop = true;
    let d = run(&named, live(Found::Ours(looping)));
    assert_eq!(d.step, FirewallStep::Nothing, "already named");
    assert!(!d.status.ready, "a firewall is ready only while healthy");
    assert_eq!(reason(&d), "CrashLoop");
    assert_eq!(d.next.as_ref().ok(), Some(&Requeue::Poll));
}

#[test]
fn a_booting_firewall_is_looked_at_sooner_than_a_machine() {
    // Its cluster's machines wait for it to phone home.
    let d = run(&firewall(), live(ours(event::INSTALLING)));
    assert!(!d.status.ready);
    assert_eq!(d.next.as_ref().ok(), Some(&Requeue::BootingGate));
    use crate::reconciler::backoff::{BOOTING_POLL, GATE_POLL, JITTER};
    assert!(GATE_POLL < BOOTING_POLL);
    assert!(
        GATE_POLL.mul_f64(1.0 - JITTER) > crate::cache::listings::BOOTING_MAX_AGE,
        "every look of a lone firewall lists its cluster anew"
    );
}

#[test]
fn an_unusable_provider_id_fails_naming_the_field() {
    let d = run(&firewall(), live(Found::PresetMissing(ID.into())));
    let error = d.next.as_ref().expect_err("an error");
    assert!(
        error.to_string().starts_with("spec.providerID: machine"),
        "{error}"
    );
    assert_eq!(
        condition(&d, Type::FirewallAllocated),
        ("False".into(), "InvalidSpec".into())
    );
}

#[test]
fn deletion_frees_the_firewall_machine_then_lets_go() {
    let d = decide(&firewall(), &Observed::Deleting(Some(vec![ID.into()])));
    assert_eq!(d.step, FirewallStep::Free(ID.into()));
    assert_eq!(reason(&d), "Deleting");
    let d = decide(&firewall(), &Observed::Deleting(Some(Vec::new())));
    assert_eq!(d.step, FirewallStep::RemoveFinalizer);
    let d = decide(&firewall(), &Observed::Unmanaged);
    assert_eq!(d.step, FirewallStep::Nothing);
    let d = decide(&firewall(), &Observed::HandsOff);
    assert_eq!(
        (d.step, d.status),
        (FirewallStep::Nothing, Default::default()),
        "hands off"
    );
}

#[test]
fn a_failed_step_is_reported_only_when_metal_api_answered() {
    let error = Error::Metal(metal_api::Error::Api {
        endpoint: "firewall allocate",
        status: 422,
        message: "no machine available".into(),
    });
    let fw = firewall();
    let allocate = FirewallStep::Allocate(Box::default());
    let (status, next) = Firewalls::failed(&fw, Default::default(), error, Some(&allocate));
    assert!(next.is_err());
    let allocated = find(&status.conditions, Type::FirewallAllocated).expect("reported");
    assert_eq!(allocated.reason, "NoMachineAvailable");
    let (status, _) = Firewalls::failed(
        &fw,
        Default::default(),
        Error::Changed {
            operation: "writing".into(),
        },
        Some(&FirewallStep::Record(serde_json::json!({}))),
    );
    assert!(
        status.conditions.is_empty(),
        "a conflict is retried, not reported"
    );
}

#[test]
fn a_lost_firewall_is_reported_never_replaced() {
    let lost = crate::controllers::allocation::Lost::Freed(ID.into());
    let d = run(&firewall(), live(Found::Lost(lost)));
    assert_eq!(d.step, FirewallStep::Nothing, "nothing is allocated");
    assert!(!d.status.ready);
    assert_eq!(reason(&d), "MachineLost");
    let message = &find(&d.status.conditions, Type::Ready)
        .expect("Ready")
        .message;
    assert!(
        message.contains("delete this MetalStackFirewall"),
        "{message}"
    );
}
