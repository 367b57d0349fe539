//! The cluster's MetalStackFirewall, as it should be: from the inline firewallSpec, from the
//! named template or through a firewall deployment. It is applied whenever it differs until the
//! firewall is allocated; after that a changed spec rolls the firewall (`rollout`).

use super::deployment::{self, Whose};
use super::firewall_name;
use super::model::{ClusterStep, FirewallSeen};
use super::rollout::{Outcome, Rollout};
use crate::api::{
    FirewallRolloutStatus, MetalStackCluster, MetalStackClusterSpec, MetalStackFirewall,
    MetalStackFirewallSpec, TemplateMeta,
};
use crate::capi::{CLONED_FROM_GROUPKIND, CLONED_FROM_NAME, CLUSTER_NAME_LABEL};
use crate::reconciler::Requeue;
use crate::reconciler::conditions::{Conditions, Reason, Type};
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use std::time::Duration;

/// A template's creation brings the cluster back (the template watch); a safety net too.
const TEMPLATE_SAFETY_NET: Duration = Duration::from_secs(300);

/// The MetalStackFirewall a cluster creates: its spec from the cluster's firewallSpec or from its
/// firewall template, the template's labels and annotations, and where it was cloned from.
pub(crate) fn plan_firewall(
    msc: &MetalStackCluster,
    cluster_name: &str,
    spec: MetalStackFirewallSpec,
    template: Option<(&str, Option<&TemplateMeta>)>,
) -> MetalStackFirewall {
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    if let Some((template_name, meta)) = template {
        if let Some(meta) = meta {
            labels.extend(meta.labels.clone());
            annotations.extend(meta.annotations.clone());
        }
        annotations.insert(CLONED_FROM_NAME.to_owned(), template_name.to_owned());
        annotations.insert(
            CLONED_FROM_GROUPKIND.to_owned(),
            format!("MetalStackFirewallTemplate.{}", crate::api::common::GROUP),
        );
    }
    // The cluster-name label is what ties the firewall to its Cluster; a template cannot
    // override it.
    labels.insert(CLUSTER_NAME_LABEL.to_owned(), cluster_name.to_owned());
    MetalStackFirewall {
        metadata: ObjectMeta {
            name: Some(firewall_name(&msc.name_any())),
            namespace: msc.namespace(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: msc.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

/// Does the cluster have a firewall: inline, from a template or through a firewall deployment?
pub(crate) fn wants_firewall(spec: &MetalStackClusterSpec) -> bool {
    spec.firewall_spec.is_some()
        || spec.firewall_template_ref.is_some()
        || spec.firewall_deployment_ref.is_some()
}

/// Why the firewall cannot be made yet: a named object is missing.
struct Missing {
    reason: Reason,
    message: String,
}

/// The firewall as it should be; Err while the named template or deployment does not exist.
fn desired(
    msc: &MetalStackCluster,
    cluster_name: &str,
    seen: &FirewallSeen,
) -> Option<Result<MetalStackFirewall, Missing>> {
    if let Some(spec) = &msc.spec.firewall_spec {
        return Some(Ok(plan_firewall(msc, cluster_name, spec.clone(), None)));
    }
    let ns = msc.namespace().unwrap_or_default();
    let (field, name) = match (&msc.spec.firewall_template_ref, &seen.deployment) {
        (Some(reference), _) => ("spec.firewallTemplateRef".to_owned(), &reference.name),
        (None, Some(Ok(deployment))) => (
            format!(
                "spec.firewallTemplateRef of MetalStackFirewallDeployment {}",
                deployment.name_any()
            ),
            &deployment.spec.firewall_template_ref.name,
        ),
        (None, Some(Err(existing))) => {
            let name = msc.spec.firewall_deployment_ref.as_ref()?.name.as_str();
            let message = crate::api::missing_reference(
                "spec.firewallDeploymentRef",
                "MetalStackFirewallDeployment",
                &ns,
                name,
                existing,
            );
            let reason = Reason::FirewallDeploymentNotFound;
            return Some(Err(Missing { reason, message }));
        }
        (None, None) => return None,
    };
    Some(match seen.template.as_ref()? {
        Ok(template) => {
            let resource = &template.spec.template;
            let meta = Some((name.as_str(), resource.metadata.as_ref()));
            let mut fw = plan_firewall(msc, cluster_name, resource.spec.clone(), meta);
            if let Some(Ok(deployment)) = &seen.deployment {
                deployment::for_deployment(&mut fw, deployment);
                deployment::follow_newest_image(&mut fw, seen);
            }
            Ok(fw)
        }
        Err(existing) => Err(Missing {
            reason: Reason::FirewallTemplateNotFound,
            message: crate::api::missing_reference(
                &field,
                "MetalStackFirewallTemplate",
                &ns,
                name,
                existing,
            ),
        }),
    })
}

/// While the cluster's firewall deployment is not the cluster's: the step that claims it, or
/// the condition that it is another cluster's.
fn unclaimed(
    msc: &MetalStackCluster,
    cluster_name: &str,
    seen: &FirewallSeen,
    conditions: &mut Conditions<'_>,
) -> Option<Outcome> {
    let Some(Ok(d)) = &seen.deployment else {
        return None;
    };
    match deployment::claim(msc, cluster_name, d) {
        Whose::Ours => None,
        Whose::Nobodys(step) => {
            let message = format!("claiming MetalStackFirewallDeployment {}", d.name_any());
            conditions.set_false(Type::FirewallReady, Reason::FirewallCreated, message);
            // The deployment's change brings the cluster back.
            Some(Outcome::ClusterStep(step, Requeue::AwaitChange))
        }
        Whose::Others(message) => {
            let reason = Reason::FirewallDeploymentTaken;
            conditions.set_false(Type::FirewallReady, reason, message);
            Some(Outcome::ClusterStep(
                ClusterStep::Nothing,
                Requeue::AwaitChange,
            ))
        }
    }
}

/// The firewall step, FirewallReady and the rollout; Ready when the cluster needs nothing more
/// from its firewall.
pub(crate) fn decide(
    msc: &MetalStackCluster,
    cluster_name: &str,
    seen: Option<&FirewallSeen>,
    conditions: &mut Conditions<'_>,
    rollout: &mut Option<FirewallRolloutStatus>,
) -> Outcome {
    if !wants_firewall(&msc.spec) {
        conditions.set_true(
            Type::FirewallReady,
            Reason::NoFirewall,
            "none of spec.firewallSpec, spec.firewallTemplateRef and spec.firewallDeploymentRef is set; no firewall is created",
        );
        return Outcome::Ready;
    }
    let Some(seen) = seen else {
        return Outcome::ClusterStep(ClusterStep::Nothing, Requeue::Poll);
    };
    if let Some(outcome) = unclaimed(msc, cluster_name, seen, conditions) {
        return outcome;
    }
    let desired = match desired(msc, cluster_name, seen) {
        Some(Ok(fw)) => fw,
        Some(Err(Missing { reason, message })) => {
            conditions.set_false(Type::FirewallReady, reason, message);
            return Outcome::ClusterStep(ClusterStep::Nothing, Requeue::After(TEMPLATE_SAFETY_NET));
        }
        None => return Outcome::ClusterStep(ClusterStep::Nothing, Requeue::Poll),
    };
    let rollout = Rollout {
        msc,
        desired,
        seen,
        conditions: &mut *conditions,
        status: rollout,
    };
    let (current, relabel) = match rollout.decide() {
        Ok(serving) => serving,
        Err(outcome) => return outcome,
    };
    let notice = deployment::following(seen).unwrap_or_default();
    let message = format!("MetalStackFirewall {} is ready{notice}", current.name_any());
    conditions.set_true(Type::FirewallReady, Reason::FirewallReady, message);
    if let Some(step) = deployment::record_on_deployment(&current, seen) {
        // The deployment's change brings the cluster back.
        return Outcome::ClusterStep(step, Requeue::AwaitChange);
    }
    match relabel {
        // The firewall's change brings the cluster back; it serves meanwhile.
        Some(step) => Outcome::Serving(step, Requeue::AwaitChange),
        None => Outcome::Ready,
    }
}
