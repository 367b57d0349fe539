//! `decide` for MetalStackClusters: network, control-plane IP, firewall child and teardown,
//! every gate and every failure, without I/O.

use super::decide::*;
use super::model::*;
use super::*;
use crate::api::{
    ApiEndpoint, MetalStackClusterSpec, MetalStackFirewallSpec, MetalStackFirewallStatus,
    TemplateMeta,
};
use crate::capi::CLUSTER_NAME_LABEL;
use crate::capi::{CLONED_FROM_GROUPKIND, CLONED_FROM_NAME};
use crate::reconciler::Error;
use crate::reconciler::Requeue;
use crate::reconciler::conditions::Type;
use crate::reconciler::conditions::find;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::time::Duration;

const IP: &str = "127.100.0.10";

/// No IP allocated yet in the public network.
fn allocate() -> EndpointSeen {
    EndpointSeen::Allocated {
        network: "internet".into(),
        ip: None,
    }
}

fn msc() -> MetalStackCluster {
    let mut msc = MetalStackCluster::new(
        "prod",
        MetalStackClusterSpec {
            partition: "fra-equ01".into(),
            project_id: "p".into(),
            public_network_id: Some("internet".into()),
            control_plane_endpoint: Some(ApiEndpoint {
                host: None,
                port: Some(6443),
            }),
            ..Default::default()
        },
    );
    msc.metadata.namespace = Some("team-a".into());
    msc.metadata.uid = Some("uid-c".into());
    msc.metadata.generation = Some(1);
    msc.metadata.finalizers = Some(vec![FINALIZER.into()]);
    msc.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        name: "prod".into(),
        uid: "uid-capi".into(),
        ..Default::default()
    }]);
    msc
}

/// A cluster whose endpoint capms already wrote.
fn with_endpoint() -> MetalStackCluster {
    let mut c = msc();
    c.spec.control_plane_endpoint = Some(ApiEndpoint {
        host: Some(IP.into()),
        port: Some(6443),
    });
    c
}

fn live(network: NetworkSeen, endpoint: EndpointSeen) -> Stages {
    Stages {
        owner: "prod".into(),
        network: Some(network),
        endpoint: Some(endpoint),
        firewall: None,
        failure_domains: None,
    }
}

fn provisioned() -> Stages {
    live(
        NetworkSeen::Allocated("net-1".into()),
        EndpointSeen::Recorded,
    )
}

fn run(msc: &MetalStackCluster, live: Stages) -> ClusterDecision {
    at_gate(msc, ClusterGate::Open(Box::new(live)))
}

fn at_gate(msc: &MetalStackCluster, gate: ClusterGate) -> ClusterDecision {
    decide(msc, &Observed::Live(Box::new(gate)))
}

fn condition(d: &ClusterDecision, type_: Type) -> (String, String, String) {
    let c = find(&d.status.conditions, type_).expect("the condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn next(d: &ClusterDecision) -> Requeue {
    *d.next.as_ref().expect("no error")
}

mod deployment;
mod failure_domains;
mod failures;
mod firewall;
mod rollout;

#[test]
fn gates_wait_for_the_owner_and_the_cluster_and_the_finalizer() {
    let mut orphan = msc();
    orphan.metadata.owner_references = None;
    let d = at_gate(&orphan, ClusterGate::NoOwner);
    assert_eq!(condition(&d, Type::Ready).1, "WaitingForClusterOwnerRef");
    assert_eq!(next(&d), Requeue::AwaitChange);
    let owner = "prod".to_owned();
    let d = at_gate(&msc(), ClusterGate::NoCluster { owner });
    assert_eq!(condition(&d, Type::Ready).1, "WaitingForCluster");
    assert_eq!(next(&d), Requeue::After(Duration::from_secs(10)));
    let d = at_gate(&msc(), ClusterGate::NotTakenUp);
    assert!(matches!(d.step, ClusterStep::AddFinalizer));
    let paused = ClusterGate::Paused("Cluster spec.paused is true".into());
    let d = at_gate(&msc(), paused);
    assert!(matches!(d.step, ClusterStep::Nothing));
    assert_eq!(condition(&d, Type::Paused).0, "True");
}

#[test]
fn the_network_is_allocated_first_and_recorded_once_found() {
    let d = run(&msc(), live(NetworkSeen::Unallocated, allocate()));
    let ClusterStep::AllocateNetwork(request) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(
        (request.projectid.as_str(), request.partitionid.as_str()),
        ("p", "fra-equ01")
    );
    assert_eq!(
        request
            .labels
            .get("cluster.metal-stack.io/id")
            .map(String::as_str),
        Some("team-a.prod")
    );
    assert_eq!(next(&d), Requeue::Now);
    assert_eq!(condition(&d, Type::NetworkReady).1, "Allocating");
    assert_eq!(condition(&d, Type::Ready).1, "Provisioning");
    let d = run(
        &msc(),
        live(NetworkSeen::Allocated("net-1".into()), allocate()),
    );
    assert_eq!(d.status.allocated_network_id.as_deref(), Some("net-1"));
    assert_eq!(d.status.network_id.as_deref(), Some("net-1"));
    assert_eq!(condition(&d, Type::NetworkReady).0, "True");
}

#[test]
fn a_given_network_that_does_not_exist_names_the_field_and_the_choices() {
    let mut given = msc();
    given.spec.private_network_id = Some("nope".into());
    let seen = NetworkSeen::GivenMissing {
        choices: "valid private networks of the project: net-1".into(),
    };
    let d = run(&given, live(seen, EndpointSeen::Recorded));
    let error = d.next.as_ref().expect_err("invalid");
    assert_eq!(
        error.to_string(),
        "spec.privateNetworkID: network \"nope\" does not exist in metal-api; valid private networks of the project: net-1"
    );
    assert_eq!(condition(&d, Type::NetworkReady).1, "InvalidSpec");
    assert_eq!(condition(&d, Type::Ready).1, "InvalidSpec");
    let d = run(&given, live(NetworkSeen::Given { ours: false }, allocate()));
    assert_eq!(d.status.network_id.as_deref(), Some("nope"));
    assert_eq!(
        d.status.allocated_network_id, None,
        "capms did not allocate it"
    );
}

#[test]
fn the_control_plane_ip_is_allocated_or_reserved_then_written_to_the_endpoint() {
    let d = run(
        &msc(),
        live(NetworkSeen::Allocated("net-1".into()), allocate()),
    );
    let ClusterStep::AllocateIp(request) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(request.type_, "ephemeral");
    assert!(
        request
            .tags
            .iter()
            .any(|t| t == "metal-stack.infrastructure.cluster.x-k8s.io/purpose=control-plane")
    );
    assert_eq!(next(&d), Requeue::Now);

    let d = run(
        &msc(),
        live(
            NetworkSeen::Allocated("net-1".into()),
            EndpointSeen::Allocated {
                network: "internet".into(),
                ip: Some(IP.into()),
            },
        ),
    );
    let ClusterStep::PatchEndpoint(endpoint) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(endpoint.host.as_deref(), Some(IP));
    assert_eq!(d.status.allocated_control_plane_ip.as_deref(), Some(IP));
    assert_eq!(
        condition(&d, Type::ControlPlaneIpReady).2,
        format!("control-plane endpoint {IP}:6443")
    );
    assert_eq!(
        next(&d),
        Requeue::AwaitChange,
        "the patch brings the cluster back"
    );

    let d = run(
        &with_endpoint(),
        live(
            NetworkSeen::Allocated("net-1".into()),
            EndpointSeen::Free {
                network: "internet".into(),
            },
        ),
    );
    let ClusterStep::ReserveIp(host, request) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!((host.as_str(), request.type_.as_str()), (IP, "static"));
    let d = run(
        &with_endpoint(),
        live(
            NetworkSeen::Allocated("net-1".into()),
            EndpointSeen::Reserved(IP.into()),
        ),
    );
    assert_eq!(d.status.allocated_control_plane_ip.as_deref(), Some(IP));
    let d = run(
        &with_endpoint(),
        live(
            NetworkSeen::Allocated("net-1".into()),
            EndpointSeen::AsGiven,
        ),
    );
    assert_eq!(
        d.status.allocated_control_plane_ip, None,
        "not capms's to free"
    );
    assert_eq!(condition(&d, Type::ControlPlaneIpReady).0, "True");
}

#[test]
fn a_missing_public_network_names_the_field_and_the_choices() {
    let seen = EndpointSeen::PublicNetworkUnusable(
        "network \"internet\" does not exist in metal-api; valid external networks: internet"
            .into(),
    );
    let d = run(
        &with_endpoint(),
        live(NetworkSeen::Allocated("net-1".into()), seen),
    );
    let error = d.next.as_ref().expect_err("invalid");
    assert!(
        error
            .to_string()
            .starts_with("spec.publicNetworkID: network \"internet\" does not exist"),
        "{error}"
    );
    assert_eq!(condition(&d, Type::ControlPlaneIpReady).1, "InvalidSpec");
}

#[test]
fn without_a_firewall_the_cluster_is_ready_once_network_and_ip_are() {
    let d = run(&with_endpoint(), provisioned());
    assert!(matches!(d.step, ClusterStep::Nothing));
    assert!(d.status.ready);
    assert_eq!(
        d.status.initialization.as_ref().and_then(|i| i.provisioned),
        Some(true)
    );
    assert_eq!(condition(&d, Type::FirewallReady).1, "NoFirewall");
    assert_eq!(
        condition(&d, Type::Ready),
        (
            "True".into(),
            "Provisioned".into(),
            "network, control-plane IP and firewall are ready".into()
        )
    );
    assert_eq!(next(&d), Requeue::Resync);
}

#[test]
fn teardown_goes_machines_retired_machines_firewall_ip_network_finalizer() {
    let gone = |left: Left| decide(&msc(), &Observed::Deleting(Some(Box::new(left))));
    let d = gone(Left {
        machines: 2,
        ..Default::default()
    });
    assert!(matches!(d.step, ClusterStep::Nothing));
    assert_eq!(condition(&d, Type::Ready).1, "WaitingForMachines");
    assert!(
        condition(&d, Type::Ready)
            .2
            .contains("2 MetalStackMachine(s)")
    );
    let d = gone(Left {
        retired: vec![("m-retired".into(), "worker-1".into())],
        firewalls: vec![("prod-firewall".into(), false)],
        ..Default::default()
    });
    assert!(
        matches!(&d.step, ClusterStep::FreeRetired(id, owner) if id == "m-retired" && owner == "worker-1"),
        "the retired machines go first, once the cluster's MetalStackMachines are gone"
    );
    let d = gone(Left {
        firewalls: vec![
            ("prod-firewall".into(), true),
            ("prod-firewall-0a1b2c3d".into(), false),
        ],
        ..Default::default()
    });
    assert!(
        matches!(&d.step, ClusterStep::DeleteFirewall(n) if n == "prod-firewall-0a1b2c3d"),
        "every firewall of the cluster goes, a rollout's too"
    );
    let d = gone(Left {
        firewalls: vec![("prod-firewall".into(), true)],
        ..Default::default()
    });
    assert!(
        matches!(d.step, ClusterStep::Nothing),
        "deleted already: wait"
    );
    let d = gone(Left {
        ips: vec![IP.into()],
        networks: vec!["net-1".into()],
        ..Default::default()
    });
    assert!(matches!(&d.step, ClusterStep::FreeIp(ip) if ip == IP));
    assert_eq!(next(&d), Requeue::Now);
    let d = gone(Left {
        networks: vec!["net-1".into()],
        ..Default::default()
    });
    assert!(matches!(&d.step, ClusterStep::FreeNetwork(id) if id == "net-1"));
    let d = gone(Left::default());
    assert!(matches!(d.step, ClusterStep::RemoveFinalizer));
    let d = decide(&msc(), &Observed::HandsOff);
    assert!(
        matches!(d.step, ClusterStep::Nothing),
        "paused or moved away: nothing freed"
    );
    assert_eq!(d.status, Default::default());
    assert!(!d.status.ready && d.status.initialization.is_none());
}

#[test]
fn a_busy_network_is_waited_for_and_other_failures_are_reported() {
    let busy = Error::Metal(metal_api::Error::Api {
        endpoint: "network free",
        status: 422,
        message: "prefixes still in use".into(),
    });
    let step = ClusterStep::FreeNetwork("net-1".into());
    let (status, next) = Clusters::failed(&msc(), Default::default(), busy, Some(&step));
    assert_eq!(next.ok(), Some(Requeue::After(Duration::from_secs(2))));
    assert_eq!(
        find(&status.conditions, Type::Ready).map(|c| c.reason.as_str()),
        Some("WaitingForNetworkRelease")
    );
    let refused = Error::Metal(metal_api::Error::Api {
        endpoint: "ip allocate",
        status: 409,
        message: "taken".into(),
    });
    let step = ClusterStep::AllocateIp(Box::default());
    let (status, next) = Clusters::failed(&msc(), Default::default(), refused, Some(&step));
    assert!(next.is_err());
    assert_eq!(
        find(&status.conditions, Type::ControlPlaneIpReady).map(|c| c.status.as_str()),
        Some("False")
    );
}

#[test]
fn a_given_control_plane_ip_is_the_endpoint_on_port_443_and_never_recorded_as_capms_s() {
    let mut given = msc();
    given.spec.control_plane_endpoint = None;
    given.spec.control_plane_ip = Some("127.100.0.142".into());
    let d = run(
        &given,
        live(
            NetworkSeen::Allocated("net-1".into()),
            EndpointSeen::AsGiven,
        ),
    );
    let ClusterStep::PatchEndpoint(endpoint) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(
        (endpoint.host.as_deref(), endpoint.port),
        (Some("127.100.0.142"), Some(443))
    );
    assert_eq!(d.status.allocated_control_plane_ip, None, "never freed");
}
