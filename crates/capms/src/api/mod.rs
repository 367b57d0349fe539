//! The custom resources capms serves, and the CRDs generated from them.
//!
//! Every kind of ours is stored as `v1alpha4`. `v1alpha3` is served too, with the same schema and
//! no conversion, so manifests written for the first metal-stack provider apply unchanged.
//! Clusters, machines, machine templates and firewall templates are served as `v1alpha1` too,
//! the API of metal-stack's Go provider, converted by the conversion webhook; its
//! MetalStackFirewallDeployment exists only as `v1alpha1`.

// kube's `printcolumn(...)` lists repeat keys such as `type_` per column; clippy reads them as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod cluster;
pub mod common;
pub mod firewall;
pub mod machine;
pub mod remediation;
pub mod templates;
pub mod v1alpha1;

pub use cluster::{
    FirewallRolloutStatus, MetalStackCluster, MetalStackClusterSpec, MetalStackClusterStatus,
    RolloutPhase,
};
pub use common::{
    ApiEndpoint, FailureDomain, Initialization, LocalObjectReference, MachineAddress,
    MachineAddressType, TemplateMeta,
};
pub use firewall::{
    EgressRule, FirewallRules, IngressRule, MetalStackFirewall, MetalStackFirewallSpec,
    MetalStackFirewallStatus, Protocol,
};
pub use machine::{MetalStackMachine, MetalStackMachineSpec, MetalStackMachineStatus};
pub use templates::{
    MetalStackClusterTemplate, MetalStackClusterTemplateResource, MetalStackClusterTemplateSpec,
    MetalStackFirewallTemplate, MetalStackFirewallTemplateResource, MetalStackFirewallTemplateSpec,
    MetalStackMachineTemplate, MetalStackMachineTemplateResource, MetalStackMachineTemplateSpec,
    MetalStackMachineTemplateStatus, NodeInfo,
};
pub(crate) use templates::{clusters_using_template, missing_reference};

use common::{
    CONVERSION_PATH, LEGACY_VERSION, PROVIDER_LABEL, SERVING_CERT, STORAGE_VERSION,
    WEBHOOK_NAMESPACE, WEBHOOK_SERVICE,
};
use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::CustomResourceExt;

/// Labels every CRD of ours carries: the Cluster API contract versions it implements (every
/// served version, the storage version last: Cluster API uses the last one listed), the
/// clusterctl marker that makes `clusterctl move` and upgrades see it, and the provider label.
fn crd_labels(crd: &CustomResourceDefinition) -> [(&'static str, String); 4] {
    let mut versions: Vec<&str> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
    versions.sort_by_key(|v| (*v == STORAGE_VERSION, *v));
    let contract = versions.join("_");
    [
        ("cluster.x-k8s.io/v1beta1", contract.clone()),
        ("cluster.x-k8s.io/v1beta2", contract),
        ("clusterctl.cluster.x-k8s.io", String::new()),
        (PROVIDER_LABEL.0, PROVIDER_LABEL.1.to_owned()),
    ]
}

/// The CRD label that makes clusterctl move every object of the kind in the moved namespace.
pub const MOVE_LABEL: &str = "clusterctl.cluster.x-k8s.io/move";

/// Adds the deprecated `v1alpha3` version (same schema), the Go provider's `v1alpha1` where it
/// has the kind, and the labels.
fn finish(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    add_legacy_version(&mut crd);
    add_go_provider_version(&mut crd);
    let kind = crd.spec.names.kind.clone();
    let labels_wanted = crd_labels(&crd);
    let labels = crd.metadata.labels.get_or_insert_with(Default::default);
    for (key, value) in labels_wanted {
        labels.insert(key.to_owned(), value);
    }
    // Firewall templates and deployments (named by clusters, owned by none), standalone
    // firewalls (tied to their Cluster by label only) and remediation templates (named by
    // MachineHealthChecks) are in no ownerReference chain: this label has clusterctl move them
    // with the rest.
    let unowned = [
        "MetalStackFirewallTemplate",
        "MetalStackFirewall",
        "MetalStackFirewallDeployment",
        "MetalStackRemediationTemplate",
    ];
    if unowned.contains(&kind.as_str()) {
        labels.insert(MOVE_LABEL.to_owned(), String::new());
    }
    crd
}

/// The deprecated `v1alpha3`: the storage version's schema under the first provider's name.
fn add_legacy_version(crd: &mut CustomResourceDefinition) {
    if let Some(stored) = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == STORAGE_VERSION)
        .cloned()
    {
        let mut legacy = stored;
        legacy.name = LEGACY_VERSION.to_owned();
        legacy.storage = false;
        legacy.deprecated = Some(true);
        legacy.deprecation_warning = Some(format!(
            "{}/{LEGACY_VERSION} is deprecated; use {}/{STORAGE_VERSION}",
            common::GROUP,
            common::GROUP
        ));
        crd.spec.versions.insert(0, legacy);
    }
}

/// The Go provider's `v1alpha1` of the kind, if it has one, converted by the conversion webhook;
/// its short names and categories join ours. The Go provider's MetalStackFirewallDeployment,
/// which capms has no version of its own of, is its own CRD.
fn add_go_provider_version(crd: &mut CustomResourceDefinition) {
    if crd
        .spec
        .versions
        .iter()
        .any(|v| v.name == v1alpha1::VERSION)
    {
        return;
    }
    let theirs = v1alpha1::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == crd.spec.names.kind);
    let Some(theirs) = theirs else { return };
    let names = &mut crd.spec.names;
    for (ours, given) in [
        (&mut names.short_names, theirs.spec.names.short_names),
        (&mut names.categories, theirs.spec.names.categories),
    ] {
        let ours = ours.get_or_insert_with(Vec::new);
        for name in given.into_iter().flatten() {
            if !ours.contains(&name) {
                ours.push(name);
            }
        }
    }
    let mut versions = theirs.spec.versions;
    for version in &mut versions {
        version.storage = false;
    }
    crd.spec.versions.splice(0..0, versions);
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".into()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: WEBHOOK_NAMESPACE.into(),
                    name: WEBHOOK_SERVICE.into(),
                    path: Some(CONVERSION_PATH.into()),
                    port: Some(443),
                }),
                ..Default::default()
            }),
        }),
    });
    let annotations = crd
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert("cert-manager.io/inject-ca-from".into(), SERVING_CERT.into());
}

/// The CRDs with their conversion webhook at `base` (`https://host:port`) instead of the
/// in-cluster Service, trusting `ca_bundle`: for control planes without a cluster network
/// (local runs and tests).
pub fn crds_converting_at(base: &str, ca_bundle: &[u8]) -> Vec<CustomResourceDefinition> {
    let url = format!("{}{CONVERSION_PATH}", base.trim_end_matches('/'));
    let mut crds = crds();
    for crd in &mut crds {
        let webhook = crd
            .spec
            .conversion
            .as_mut()
            .and_then(|c| c.webhook.as_mut());
        if let Some(webhook) = webhook {
            webhook.client_config = Some(WebhookClientConfig {
                url: Some(url.clone()),
                ca_bundle: Some(ByteString(ca_bundle.to_vec())),
                service: None,
            });
        }
        if let Some(annotations) = crd.metadata.annotations.as_mut() {
            annotations.remove("cert-manager.io/inject-ca-from");
        }
    }
    crds
}

/// Every CRD capms serves, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        MetalStackCluster::crd(),
        MetalStackClusterTemplate::crd(),
        MetalStackFirewall::crd(),
        v1alpha1::MetalStackFirewallDeployment::crd(),
        MetalStackFirewallTemplate::crd(),
        MetalStackMachine::crd(),
        MetalStackMachineTemplate::crd(),
        remediation::MetalStackRemediation::crd(),
        remediation::MetalStackRemediationTemplate::crd(),
    ]
    .into_iter()
    .map(finish)
    .collect()
}

/// Each CRD with its file name, rendered as YAML.
pub fn render(
    crds: Vec<CustomResourceDefinition>,
) -> Result<Vec<(String, String)>, serde_saphyr::ser::Error> {
    crds.into_iter()
        .map(|crd| {
            let file = format!("{}.yaml", crd.spec.names.plural);
            Ok((file, format!("---\n{}", serde_saphyr::to_string(&crd)?)))
        })
        .collect()
}
