//! The cluster's firewall through one of the Go provider's firewall deployments: made from the
//! template it names, on the machine it names, recorded back on it.

use super::*;
use crate::api::v1alpha1::{
    AutoUpdate, MetalStackFirewallDeployment, MetalStackFirewallDeploymentSpec, NamedReference,
};
use crate::api::{
    LocalObjectReference, MetalStackFirewall, MetalStackFirewallTemplate,
    MetalStackFirewallTemplateResource, MetalStackFirewallTemplateSpec,
};
use crate::controllers::cluster::rollout::{Role, with_role};
use crate::ownership::FIREWALL_DEPLOYMENT_LABEL;
use kube::ResourceExt;

fn template_spec() -> crate::api::MetalStackFirewallSpec {
    crate::api::MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        ..Default::default()
    }
}

const TAKEN_OVER: &str = "metal://fra-equ01/2294c949-88f6-5390-8154-fa53d93a3313";

fn deployed() -> MetalStackCluster {
    let mut c = with_endpoint();
    c.spec.firewall_deployment_ref = Some(LocalObjectReference {
        name: "edge".into(),
    });
    c
}

fn deployment(managed: Option<&str>, auto_update: bool) -> MetalStackFirewallDeployment {
    let mut d = MetalStackFirewallDeployment::new(
        "edge",
        MetalStackFirewallDeploymentSpec {
            firewall_template_ref: NamedReference {
                name: "edge-template".into(),
            },
            managed_resource_ref: managed.map(|name| NamedReference { name: name.into() }),
            auto_update: Some(AutoUpdate {
                machine_image: Some(auto_update),
            }),
        },
    );
    d.metadata.namespace = Some("team-a".into());
    // Claimed by the cluster of these tests, as the cluster controller (or the Go provider) does.
    d.metadata.owner_references = Some(vec![OwnerReference {
        kind: "MetalStackCluster".into(),
        name: "prod".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    d
}

fn template() -> MetalStackFirewallTemplate {
    let mut t = MetalStackFirewallTemplate::new(
        "edge-template",
        MetalStackFirewallTemplateSpec {
            template: MetalStackFirewallTemplateResource {
                metadata: None,
                spec: template_spec(),
            },
        },
    );
    t.metadata.namespace = Some("team-a".into());
    t
}

fn seen(
    current: Option<MetalStackFirewall>,
    deployment: Result<MetalStackFirewallDeployment, Vec<String>>,
) -> Stages {
    Stages {
        firewall: Some(FirewallSeen {
            firewalls: current.into_iter().collect(),
            deployment: Some(deployment),
            template: Some(Ok(template())),
            ..Default::default()
        }),
        ..provisioned()
    }
}

#[test]
fn the_firewall_takes_over_the_machine_the_deployment_names() {
    let d = run(
        &deployed(),
        seen(None, Ok(deployment(Some(TAKEN_OVER), false))),
    );
    let ClusterStep::CreateFirewall(fw) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(fw.spec.image, template_spec().image, "the template's spec");
    assert_eq!(fw.spec.provider_id.as_deref(), Some(TAKEN_OVER));
    assert_eq!(
        fw.labels()
            .get(FIREWALL_DEPLOYMENT_LABEL)
            .map(String::as_str),
        Some("edge")
    );
    let d = run(&deployed(), seen(None, Ok(deployment(None, false))));
    let ClusterStep::CreateFirewall(fw) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(
        fw.spec.provider_id, None,
        "a new deployment gets a new machine"
    );
}

#[test]
fn an_allocated_firewall_is_recorded_on_the_deployment_and_auto_update_is_said_not_done() {
    let d = run(&deployed(), seen(None, Ok(deployment(None, true))));
    let ClusterStep::CreateFirewall(created) = d.step else {
        panic!("{:?}", d.step)
    };
    let mut fw = with_role(*created, Role::Serving);
    fw.spec.provider_id = Some(TAKEN_OVER.into());
    fw.status = Some(MetalStackFirewallStatus {
        ready: true,
        ..Default::default()
    });
    let d = run(
        &deployed(),
        seen(Some(fw.clone()), Ok(deployment(None, true))),
    );
    let ClusterStep::RecordFirewallOnDeployment(name, provider_id) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!((name.as_str(), provider_id.as_str()), ("edge", TAKEN_OVER));
    assert_eq!(next(&d), Requeue::AwaitChange);

    let d = run(
        &deployed(),
        seen(Some(fw.clone()), Ok(deployment(Some(TAKEN_OVER), true))),
    );
    assert!(d.status.ready);
    let (status, _, message) = condition(&d, Type::FirewallReady);
    assert_eq!(status, "True");
    assert!(message.ends_with("prod-firewall is ready"), "{message}");

    // spec.autoUpdate.machineImage: the newest image of the OS; a newer one rolls the firewall.
    let newest = |image: &str| {
        let mut live = seen(Some(fw.clone()), Ok(deployment(Some(TAKEN_OVER), true)));
        if let Some(f) = live.firewall.as_mut() {
            f.newest_image = Some(image.into());
        }
        live
    };
    let d = run(&deployed(), newest("firewall-ubuntu-3.0"));
    let (_, _, message) = condition(&d, Type::FirewallReady);
    assert!(
        message.ends_with("following spec.autoUpdate.machineImage of MetalStackFirewallDeployment edge: the newest firewall image is firewall-ubuntu-3.0"),
        "{message}"
    );
    let d = run(&deployed(), newest("firewall-ubuntu-3.1"));
    let ClusterStep::RollInFirewall(new) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(new.spec.image, "firewall-ubuntu-3.1");
    assert_eq!(new.spec.provider_id, None, "not the deployment's machine");
    assert!(
        new.annotations()
            .contains_key(crate::ownership::ROLLED_IN_ANNOTATION)
    );
    assert!(d.status.ready, "the taken-over firewall serves meanwhile");
    let mut off = newest("firewall-ubuntu-3.1");
    if let Some(Ok(d)) = off.firewall.as_mut().and_then(|f| f.deployment.as_mut()) {
        d.spec.auto_update = None;
    }
    assert!(
        matches!(run(&deployed(), off).step, ClusterStep::Nothing),
        "only when asked"
    );
}

#[test]
fn a_missing_deployment_is_named_with_the_deployments_there_are() {
    let d = run(&deployed(), seen(None, Err(vec!["core".into()])));
    assert!(matches!(d.step, ClusterStep::Nothing), "nothing is created");
    let (status, reason, message) = condition(&d, Type::FirewallReady);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "FirewallDeploymentNotFound")
    );
    assert_eq!(
        message,
        "spec.firewallDeploymentRef: MetalStackFirewallDeployment team-a/edge does not exist (yet); the firewall is created once it does; MetalStackFirewallDeployments in the namespace: core"
    );
}

#[test]
fn a_given_network_labelled_for_the_cluster_is_freed_with_it() {
    let mut given = with_endpoint();
    given.spec.private_network_id = Some("net-go".into());
    let d = run(&given, live(NetworkSeen::Given { ours: true }, allocate()));
    assert_eq!(d.status.allocated_network_id.as_deref(), Some("net-go"));
    let d = run(&given, live(NetworkSeen::Given { ours: false }, allocate()));
    assert_eq!(
        d.status.allocated_network_id, None,
        "someone else's network"
    );
}

#[test]
fn a_deployment_is_claimed_once_and_serves_one_cluster() {
    let mut owned = deployment(None, false);
    owned.metadata.owner_references = None;
    let mut cluster = deployed();
    cluster.metadata.uid = Some("uid-prod".into());
    let d = run(&cluster, seen(None, Ok(owned.clone())));
    let ClusterStep::ClaimDeployment {
        name,
        owners,
        labels,
    } = &d.step
    else {
        panic!("{:?}", d.step)
    };
    assert_eq!(name, "edge");
    assert_eq!(
        (owners.len(), owners[0].name.as_str(), owners[0].controller),
        (1, "prod", Some(true))
    );
    assert!(labels.contains_key(crate::capi::CLUSTER_NAME_LABEL));

    owned.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "infrastructure.cluster.x-k8s.io/v1alpha4".into(),
        kind: "MetalStackCluster".into(),
        name: "other".into(),
        uid: "uid-other".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    let d = run(&cluster, seen(None, Ok(owned)));
    assert!(matches!(d.step, ClusterStep::Nothing), "{:?}", d.step);
    let (status, reason, message) = condition(&d, Type::FirewallReady);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "FirewallDeploymentTaken")
    );
    assert!(
        message.contains("belongs to MetalStackCluster other"),
        "{message}"
    );
}
