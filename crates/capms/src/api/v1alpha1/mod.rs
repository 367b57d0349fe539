//! `v1alpha1`: the API of metal-stack's Go provider (cluster-api-provider-metal-stack v0.8.0),
//! field for field, so that its users' manifests and stored objects stay valid under capms.
//! Doc comments say what each field means to capms.

mod cluster;
mod firewall;
mod machine;

pub use cluster::{ClusterStatus, ControlPlaneEndpoint, MetalStackCluster, MetalStackClusterSpec};
pub use firewall::{
    AllowedNetworks, AutoUpdate, ContentFrom, EgressRule, EgressRuleSnat, FirewallDeploymentStatus,
    IngressRule, KeyRef, MetalStackFirewallDeployment, MetalStackFirewallDeploymentSpec,
    MetalStackFirewallTemplate, MetalStackFirewallTemplateSpec, RateLimit, RuleSet,
    UserdataContent,
};
pub use machine::{
    MachineStatus, MachineTemplateObject, MetalStackMachine, MetalStackMachineSpec,
    MetalStackMachineTemplate, MetalStackMachineTemplateSpec,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceSubresourceStatus, CustomResourceSubresources,
};
use kube::CustomResourceExt;

/// The version's name.
pub(crate) const VERSION: &str = "v1alpha1";
/// Port of the control-plane endpoint the Go provider writes: its kubeadm templates bind the
/// API server to 443.
pub(crate) const API_PORT: i32 = 443;

/// An integer without a format, as the Go provider's schema has ports.
fn integer(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer"})
}

/// An object without properties, as the Go provider's schema has a template's metadata.
fn object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}

/// Names an object in the same namespace.
#[derive(
    serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub struct NamedReference {
    /// Name of the object.
    pub name: String,
}

/// The CRDs of `v1alpha1`, one version each: the Go provider's schema, printer columns and names.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let spec_optional = |mut crd: CustomResourceDefinition| {
        // The Go provider's clusters, machines and machine templates may leave out their spec.
        for version in &mut crd.spec.versions {
            let root = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut());
            if let Some(root) = root {
                root.required = None;
            }
        }
        crd
    };
    // The Go provider's firewall template declares a status subresource, though it has no
    // status: the apiserver then ignores a status sent with the object.
    let mut firewall_template = MetalStackFirewallTemplate::crd();
    for version in &mut firewall_template.spec.versions {
        version.subresources = Some(CustomResourceSubresources {
            status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
            scale: None,
        });
    }
    vec![
        spec_optional(MetalStackCluster::crd()),
        MetalStackFirewallDeployment::crd(),
        firewall_template,
        spec_optional(MetalStackMachine::crd()),
        spec_optional(MetalStackMachineTemplate::crd()),
    ]
}

/// The Go provider v0.8.0's own CRD of `plural`, read from the shared reference (never copied
/// into this repository): what the `v1alpha1` types and the conversion tables are checked against.
#[cfg(test)]
pub(crate) fn go_provider_crd(plural: &str) -> serde_json::Value {
    let file = format!(
        "{}/../../../shared/reference/capms-v0.8.0/crd/infrastructure.cluster.x-k8s.io_{plural}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[cfg(test)]
mod tests;
