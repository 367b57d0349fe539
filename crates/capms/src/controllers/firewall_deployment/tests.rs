use super::*;
use crate::api::v1alpha1::{AutoUpdate, MetalStackFirewallDeploymentSpec, NamedReference};
use crate::api::{MetalStackFirewall, MetalStackFirewallStatus};
use crate::reconciler::conditions::{Type, find};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn deployment(auto_update: bool) -> MetalStackFirewallDeployment {
    let mut d = MetalStackFirewallDeployment::new(
        "edge",
        MetalStackFirewallDeploymentSpec {
            firewall_template_ref: NamedReference {
                name: "edge-template".into(),
            },
            managed_resource_ref: None,
            auto_update: Some(AutoUpdate {
                machine_image: Some(auto_update),
            }),
        },
    );
    d.metadata.namespace = Some("team-a".into());
    d.metadata.finalizers = Some(vec![FINALIZER.into()]);
    d
}

fn firewall(allocated: bool, ready: bool) -> MetalStackFirewall {
    let mut fw = MetalStackFirewall::new("prod-firewall", Default::default());
    if allocated {
        fw.spec.provider_id = Some("metal://mini-lab/2294c949-88f6-5390-8154-fa53d93a3313".into());
    }
    fw.status = Some(MetalStackFirewallStatus {
        ready,
        ..Default::default()
    });
    fw
}

fn ready_condition(d: &DeploymentDecision) -> (String, String, String) {
    let c = find(&d.status.conditions, Type::Ready).expect("Ready");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn live(firewall: Option<MetalStackFirewall>) -> Observed {
    Observed::Live(Box::new(Seen { firewall }))
}

#[test]
fn the_status_follows_the_firewall_made_for_the_deployment() {
    let d = decide::decide(&deployment(false), &live(None));
    assert!(!d.status.ready);
    assert_eq!(d.status.initialization, None);
    let (status, reason, message) = ready_condition(&d);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "WaitingForFirewall")
    );
    assert!(message.contains("edge-template"), "{message}");

    let d = decide::decide(&deployment(false), &live(Some(firewall(true, false))));
    assert!(!d.status.ready);
    assert_eq!(
        d.status.initialization.clone().and_then(|i| i.provisioned),
        Some(true),
        "allocated"
    );
    let (status, reason, message) = ready_condition(&d);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "WaitingForFirewall")
    );
    assert!(message.ends_with("to become ready"), "{message}");

    let d = decide::decide(&deployment(true), &live(Some(firewall(true, true))));
    assert!(d.status.ready);
    let (status, _, message) = ready_condition(&d);
    assert_eq!(status, "True");
    assert!(
        message.ends_with("spec.autoUpdate.machineImage: capms rolls the firewall to the newest firewall image of its operating system and minor version"),
        "{message}"
    );
    assert_eq!(d.step, DeploymentStep::Nothing);
}

#[test]
fn a_deleted_deployment_goes_once_its_firewall_is_gone() {
    let mut deleted = deployment(false);
    deleted.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    let waiting = Observed::Deleting(Some(Seen {
        firewall: Some(firewall(true, true)),
    }));
    let d = decide::decide(&deleted, &waiting);
    assert_eq!(d.step, DeploymentStep::Nothing);
    assert!(!d.status.ready);
    let gone = Observed::Deleting(Some(Seen { firewall: None }));
    assert_eq!(
        decide::decide(&deleted, &gone).step,
        DeploymentStep::RemoveFinalizer
    );
}
