//! The custom resources capms serves, and the CRDs generated from them.
//!
//! Every kind is stored as `v1alpha4`. `v1alpha3` is served too, with the same schema and no
//! conversion, so manifests written for the first metal-stack provider apply unchanged.

// kube's `printcolumn(...)` lists repeat keys such as `type_` per column; clippy reads them as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod cluster;
pub mod common;
pub mod firewall;
pub mod machine;
pub mod templates;
pub mod v1alpha1;

pub use cluster::{MetalStackCluster, MetalStackClusterSpec, MetalStackClusterStatus};
pub use common::{
    ApiEndpoint, Initialization, LocalObjectReference, MachineAddress, MachineAddressType,
    TemplateMeta,
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
    firewall_template_missing,
};

use common::{LEGACY_VERSION, PROVIDER_LABEL, STORAGE_VERSION};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Value of the Cluster API contract labels: every served version, the storage version last
/// (Cluster API uses the last one listed).
const CONTRACT_VERSIONS: &str = "v1alpha3_v1alpha4";

/// Labels every CRD of ours carries: the Cluster API contract versions it implements, the
/// clusterctl marker that makes `clusterctl move` and upgrades see it, and the provider label.
fn crd_labels() -> [(&'static str, &'static str); 4] {
    [
        ("cluster.x-k8s.io/v1beta1", CONTRACT_VERSIONS),
        ("cluster.x-k8s.io/v1beta2", CONTRACT_VERSIONS),
        ("clusterctl.cluster.x-k8s.io", ""),
        PROVIDER_LABEL,
    ]
}

/// The CRD label that makes clusterctl move every object of the kind in the moved namespace.
pub const MOVE_LABEL: &str = "clusterctl.cluster.x-k8s.io/move";

/// Adds the deprecated `v1alpha3` version (same schema) and the contract labels.
fn finish(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let kind = crd.spec.names.kind.clone();
    let labels = crd.metadata.labels.get_or_insert_with(Default::default);
    for (key, value) in crd_labels() {
        labels.insert(key.to_owned(), value.to_owned());
    }
    // Firewall templates (named by clusters, owned by none) and standalone firewalls (tied to
    // their Cluster by label only) are in no ownerReference chain: this label has clusterctl
    // move them with the rest.
    if kind == "MetalStackFirewallTemplate" || kind == "MetalStackFirewall" {
        labels.insert(MOVE_LABEL.to_owned(), String::new());
    }
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
    crd
}

/// Every CRD capms serves, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        MetalStackCluster::crd(),
        MetalStackClusterTemplate::crd(),
        MetalStackFirewall::crd(),
        MetalStackFirewallTemplate::crd(),
        MetalStackMachine::crd(),
        MetalStackMachineTemplate::crd(),
    ]
    .into_iter()
    .map(finish)
    .collect()
}

/// Each CRD with the file name it is committed under in `manifests/crd/`, rendered as YAML.
pub fn crd_files() -> Result<Vec<(String, String)>, serde_saphyr::ser::Error> {
    crds()
        .into_iter()
        .map(|crd| {
            let file = format!("{}.yaml", crd.spec.names.plural);
            Ok((file, format!("---\n{}", serde_saphyr::to_string(&crd)?)))
        })
        .collect()
}
