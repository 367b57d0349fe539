//! The webhook configurations and the install manifests of `webhooks/`, generated from the
//! route table the server mounts.

use super::admit::AdmissionPhase;
use super::kinds::AdmittedKind;
use super::routes::routes;
use crate::api::common::GROUP;
use crate::api::common::{
    MANAGER_SERVICE_ACCOUNT, SERVING_CERT, WEBHOOK_NAMESPACE, WEBHOOK_SERVICE,
};
use crate::capi::CLONED_FROM_GROUPKIND;
use serde_json::{Value, json};

/// Where the apiserver sends admission requests.
pub enum ClientConfig {
    /// The in-cluster Service (what the install manifests use; cert-manager injects the CA).
    Service { namespace: String, name: String },
    /// A URL (local control planes and tests), with the CA bundle to trust.
    Url { base: String, ca_bundle: Vec<u8> },
}

/// The CEL condition under which the apiserver calls a webhook: a creation, or an update that
/// changes the spec. An object without a spec (never one of ours) is sent too, rather than the
/// condition failing to evaluate.
pub(crate) const SPEC_CHANGED: &str = "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec";

/// The user the installed manager runs as: its ServiceAccount.
pub(crate) fn installed_manager_user() -> String {
    format!("system:serviceaccount:{WEBHOOK_NAMESPACE}:{MANAGER_SERVICE_ACCOUNT}")
}

/// The CEL condition that leaves out the manager's own updates: it only writes what it decided
/// itself (finalizers, `spec.providerID`, labels), nothing a person typed.
pub(crate) fn not_updated_by(manager_user: &str) -> String {
    let quoted = serde_json::to_string(manager_user).unwrap_or_default();
    format!("request.operation != 'UPDATE' || request.userInfo.username != {quoted}")
}

/// The CEL condition that leaves out a MetalStackMachine Cluster API creates from a
/// MetalStackMachineTemplate (a MachineSet's or a control plane's replica). Its spec is the
/// template's, which the template webhook checked; sending each replica would put two admission
/// calls into every replica Cluster API creates, one after the other. Its partition is left
/// unwritten: the machine takes its cluster's, as the mutating webhook would have written.
pub(crate) fn not_cloned_from_template(template: AdmittedKind) -> String {
    let annotation = CLONED_FROM_GROUPKIND;
    let group_kind = format!("{}.{GROUP}", template.name());
    format!(
        "request.operation != 'CREATE' || !has(object.metadata.annotations) || !('{annotation}' in object.metadata.annotations) || object.metadata.annotations['{annotation}'] != '{group_kind}'"
    )
}

/// When the apiserver calls `kind`'s webhooks: spec changes, except the manager's own updates
/// and, for machines, replicas Cluster API clones from a template.
fn match_conditions(kind: AdmittedKind, manager_user: Option<&str>) -> Vec<Value> {
    // Updates that leave the spec alone (finalizers, labels, owner references, most of
    // Cluster API's and capms's own writes) never reach the webhook.
    let mut conditions = vec![json!({"name": "spec-changed", "expression": SPEC_CHANGED})];
    if let Some(user) = manager_user {
        conditions.push(json!({"name": "not-the-manager", "expression": not_updated_by(user)}));
    }
    if kind == AdmittedKind::Machine {
        let expression = not_cloned_from_template(AdmittedKind::MachineTemplate);
        conditions.push(json!({"name": "not-a-template-replica", "expression": expression}));
    }
    conditions
}

/// Mutating and Validating webhook configurations for every route. `manager_user` is the user
/// the manager runs as, whose updates need no admission.
pub fn webhook_configurations(
    client_config: &ClientConfig,
    cert_annotation: Option<&str>,
    manager_user: Option<&str>,
) -> [Value; 2] {
    let entries = |phase: AdmissionPhase| -> Vec<Value> {
        routes()
            .into_iter()
            .filter(|r| r.phase == phase)
            .filter(|r| r.phase == AdmissionPhase::Validating || r.kind.defaulted())
            .map(|r| {
                let client = match client_config {
                    ClientConfig::Service { namespace, name } => json!({"service": {"namespace": namespace, "name": name, "path": r.path()}}),
                    ClientConfig::Url { base, ca_bundle } => {
                        use base64::Engine;
                        json!({"url": format!("{}{}", base.trim_end_matches('/'), r.path()), "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_bundle)})
                    }
                };
                json!({
                    "name": r.webhook_name(),
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "matchPolicy": "Equivalent",
                    "timeoutSeconds": 10,
                    "matchConditions": match_conditions(r.kind, manager_user),
                    "clientConfig": client,
                    "rules": [{
                        "apiGroups": [GROUP],
                        "apiVersions": ["v1alpha3", "v1alpha4"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [r.kind.plural()],
                        "scope": "Namespaced"
                    }]
                })
            })
            .collect()
    };
    let metadata = |name: &str| {
        let mut m = json!({"name": name, "labels": {"cluster.x-k8s.io/provider": "infrastructure-metal-stack"}});
        if let Some(a) = cert_annotation {
            m["annotations"] = json!({"cert-manager.io/inject-ca-from": a});
        }
        m
    };
    [
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": metadata("capms-mutating-webhook-configuration"), "webhooks": entries(AdmissionPhase::Mutating)}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
               "metadata": metadata("capms-validating-webhook-configuration"), "webhooks": entries(AdmissionPhase::Validating)}),
    ]
}

/// The install manifests of `webhooks/`: the Service in front of the manager's webhook port and
/// both configurations, the CA injected by cert-manager from the `capms-serving-cert` Certificate.
pub fn install_manifests_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": WEBHOOK_NAMESPACE, "labels": {"cluster.x-k8s.io/provider": "infrastructure-metal-stack"}},
        "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": "webhook-server"}],
                 "selector": {"cluster.x-k8s.io/provider": "infrastructure-metal-stack", "control-plane": "capms-controller-manager"}}
    });
    let config = ClientConfig::Service {
        namespace: WEBHOOK_NAMESPACE.into(),
        name: WEBHOOK_SERVICE.into(),
    };
    let user = installed_manager_user();
    let [mutating, validating] = webhook_configurations(&config, Some(SERVING_CERT), Some(&user));
    let mut out = String::from(
        "# Generated by `capms webhooks` from the route table the server mounts; do not edit.\n",
    );
    for doc in [service, mutating, validating] {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&doc)?);
    }
    Ok(out)
}
