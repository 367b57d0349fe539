//! The cluster's firewall: created, followed until allocated, made from a template.

use super::*;
use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{MetalStackFirewall, MetalStackFirewallTemplate};
use crate::controllers::cluster::firewall::plan_firewall;
use crate::controllers::cluster::rollout::{Role, with_role};
use crate::ownership::FIREWALL_ROLE_LABEL;
use kube::ResourceExt;
use std::sync::Arc;

fn with_firewall() -> MetalStackCluster {
    let mut c = with_endpoint();
    c.spec.firewall_spec = Some(spec());
    c
}

fn firewall_live(current: Option<MetalStackFirewall>) -> Stages {
    Stages {
        firewall: Some(FirewallSeen {
            firewalls: current.into_iter().collect(),
            ..Default::default()
        }),
        ..provisioned()
    }
}

#[test]
fn the_firewall_is_created_then_awaited() {
    let d = run(&with_firewall(), firewall_live(None));
    let ClusterStep::CreateFirewall(fw) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(fw.spec, spec());
    assert_eq!(condition(&d, Type::FirewallReady).1, "FirewallCreated");
    assert!(!d.status.ready);
    assert_eq!(next(&d), Requeue::After(Duration::from_secs(60)));

    assert_eq!(
        fw.labels().get(FIREWALL_ROLE_LABEL).map(String::as_str),
        Some("Provisioning")
    );
    let created = *fw.clone();
    let d = run(&with_firewall(), firewall_live(Some(created.clone())));
    assert!(matches!(d.step, ClusterStep::Nothing));
    assert_eq!(condition(&d, Type::FirewallReady).1, "WaitingForFirewall");
    let mut ready = created;
    ready.status = Some(MetalStackFirewallStatus {
        ready: true,
        ..Default::default()
    });
    // Ready, it is labelled the one serving; then the cluster is ready.
    let d = run(&with_firewall(), firewall_live(Some(ready.clone())));
    let ClusterStep::RelabelFirewall { labels, .. } = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(
        labels.get(FIREWALL_ROLE_LABEL).map(String::as_str),
        Some("Serving")
    );
    let serving = with_role(ready, Role::Serving);
    let d = run(&with_firewall(), firewall_live(Some(serving)));
    assert!(d.status.ready);
    assert_eq!(condition(&d, Type::FirewallReady).1, "FirewallReady");
}

#[test]
fn a_firewall_spec_edit_reaches_the_firewall_until_it_is_allocated() {
    let mut edited = with_firewall();
    if let Some(s) = edited.spec.firewall_spec.as_mut() {
        s.image = "firewall-ubuntu-3.1".into();
    }
    let before = plan_firewall(&with_firewall(), "prod", spec(), None);
    let d = run(&edited, firewall_live(Some(before.clone())));
    let ClusterStep::UpdateFirewall(fw) = &d.step else {
        panic!("{:?}", d.step)
    };
    assert_eq!(fw.spec.image, "firewall-ubuntu-3.1");

    let mut allocated = before;
    allocated.spec.provider_id =
        Some("metal://fra-equ01/e0ab02d2-27cd-5a5e-8efc-080ba80cf258".into());
    allocated.status = Some(MetalStackFirewallStatus {
        ready: true,
        machine_id: Some("m".into()),
        ..Default::default()
    });
    let d = run(&edited, firewall_live(Some(allocated.clone())));
    assert!(
        matches!(&d.step, ClusterStep::RollInFirewall(fw) if fw.spec.image == "firewall-ubuntu-3.1"),
        "an allocated firewall is rolled: {:?}",
        d.step
    );
    let d = run(&with_firewall(), firewall_live(Some(allocated)));
    assert_eq!(
        condition(&d, Type::FirewallReady).1,
        "FirewallReady",
        "providerID is not drift"
    );
}

#[test]
fn a_missing_template_is_named_with_the_templates_there_are() {
    let mut templated = with_endpoint();
    templated.spec.firewall_template_ref = Some(crate::api::LocalObjectReference {
        name: "edge".into(),
    });
    let seen = FirewallSeen {
        template: Some(Err(vec!["core".into()])),
        ..Default::default()
    };
    let d = run(
        &templated,
        Stages {
            firewall: Some(seen),
            ..provisioned()
        },
    );
    assert!(matches!(d.step, ClusterStep::Nothing), "nothing is created");
    let (_, reason, message) = condition(&d, Type::FirewallReady);
    assert_eq!(reason, "FirewallTemplateNotFound");
    assert!(
        message.contains("MetalStackFirewallTemplate team-a/edge does not exist (yet)"),
        "{message}"
    );
    assert!(
        message.ends_with("MetalStackFirewallTemplates in the namespace: core"),
        "{message}"
    );
    assert_eq!(next(&d), Requeue::After(Duration::from_secs(300)));
}

fn named_cluster() -> MetalStackCluster {
    let mut msc = MetalStackCluster::new("c1", MetalStackClusterSpec::default());
    msc.metadata.namespace = Some("team-a".into());
    msc.metadata.uid = Some("0b9c5b4e-0000-4000-8000-000000000001".into());
    msc
}

fn spec() -> MetalStackFirewallSpec {
    MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        ..Default::default()
    }
}

#[test]
fn a_template_maps_to_the_clusters_of_its_namespace_that_name_it() {
    let using = |ns: &str, name: &str, template: Option<&str>| {
        let mut c = MetalStackCluster::new(name, MetalStackClusterSpec::default());
        c.metadata.namespace = Some(ns.into());
        c.spec.firewall_template_ref =
            template.map(|t| crate::api::LocalObjectReference { name: t.into() });
        Arc::new(c)
    };
    let clusters = [
        using("team-a", "one", Some("edge")),
        using("team-a", "two", Some("core")),
        using("team-a", "three", None),
        using("team-b", "four", Some("edge")),
        using("team-a", "five", Some("edge")),
    ];
    let mut template = MetalStackFirewallTemplate::new("edge", Default::default());
    template.metadata.namespace = Some("team-a".into());
    let none: [MetalStackFirewallDeployment; 0] = [];
    let names: Vec<_> = crate::api::clusters_using_template(&template, &clusters, &none)
        .into_iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(names, ["one", "five"]);
}

#[test]
fn an_inline_firewall_carries_only_the_cluster_label_and_owner() {
    let fw = plan_firewall(&named_cluster(), "prod", spec(), None);
    assert_eq!(fw.metadata.name.as_deref(), Some("c1-firewall"));
    assert_eq!(fw.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(
        fw.metadata.labels,
        Some([(CLUSTER_NAME_LABEL.to_owned(), "prod".to_owned())].into())
    );
    assert_eq!(fw.metadata.annotations, None);
    let owner = &fw.metadata.owner_references.expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("MetalStackCluster", Some(true))
    );
    assert_eq!(fw.spec, spec());
}

#[test]
fn a_templated_firewall_takes_the_template_metadata_but_keeps_its_cluster_label() {
    let meta = TemplateMeta {
        labels: [
            ("team".to_owned(), "net".to_owned()),
            (CLUSTER_NAME_LABEL.to_owned(), "someone-else".to_owned()),
        ]
        .into(),
        annotations: [("note".to_owned(), "shared rules".to_owned())].into(),
    };
    let fw = plan_firewall(
        &named_cluster(),
        "prod",
        spec(),
        Some(("edge", Some(&meta))),
    );
    let labels = fw.metadata.labels.expect("labels");
    assert_eq!(labels.get("team").map(String::as_str), Some("net"));
    assert_eq!(
        labels.get(CLUSTER_NAME_LABEL).map(String::as_str),
        Some("prod"),
        "a template cannot move the firewall to another cluster"
    );
    let annotations = fw.metadata.annotations.expect("annotations");
    assert_eq!(
        annotations.get("note").map(String::as_str),
        Some("shared rules")
    );
    assert_eq!(
        annotations.get(CLONED_FROM_NAME).map(String::as_str),
        Some("edge")
    );
    assert_eq!(
        annotations.get(CLONED_FROM_GROUPKIND).map(String::as_str),
        Some("MetalStackFirewallTemplate.infrastructure.cluster.x-k8s.io")
    );
}
