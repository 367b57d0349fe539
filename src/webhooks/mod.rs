//! Admission webhooks: one route per kind and operation, in the kubebuilder path scheme. The same
//! route table mounts the handlers and generates the webhook configurations in `webhooks/`.

pub mod catalog;
pub mod rules;

use crate::api::{
    MetalStackCluster, MetalStackClusterTemplate, MetalStackFirewall, MetalStackFirewallTemplate,
    MetalStackMachine, MetalStackMachineTemplate,
};
use crate::capi::{CLUSTER_NAME_LABEL, Cluster};
use crate::controllers::context::{OwnerKind, owner_marks_of};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use catalog::{Catalog, CatalogCache};
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use rules::Report;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

pub use crate::api::common::GROUP;
/// Annotation of Cluster API's ClusterClass dry runs, exempt from template immutability.
pub const DRY_RUN_ANNOTATION: &str = "topology.cluster.x-k8s.io/dry-run";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cluster,
    ClusterTemplate,
    Firewall,
    FirewallTemplate,
    Machine,
    MachineTemplate,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Cluster,
        Kind::ClusterTemplate,
        Kind::Firewall,
        Kind::FirewallTemplate,
        Kind::Machine,
        Kind::MachineTemplate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Cluster => "MetalStackCluster",
            Kind::ClusterTemplate => "MetalStackClusterTemplate",
            Kind::Firewall => "MetalStackFirewall",
            Kind::FirewallTemplate => "MetalStackFirewallTemplate",
            Kind::Machine => "MetalStackMachine",
            Kind::MachineTemplate => "MetalStackMachineTemplate",
        }
    }

    fn singular(self) -> String {
        self.name().to_lowercase()
    }

    pub fn plural(self) -> String {
        format!("{}s", self.singular())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Mutate,
    Validate,
}

/// One webhook: a kind and what is done to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub kind: Kind,
    pub step: Step,
}

impl Route {
    pub fn path(&self) -> String {
        let verb = match self.step {
            Step::Mutate => "mutate",
            Step::Validate => "validate",
        };
        format!(
            "/{verb}-infrastructure-cluster-x-k8s-io-v1alpha4-{}",
            self.kind.singular()
        )
    }

    /// The webhook's name in its configuration.
    pub fn webhook_name(&self) -> String {
        let verb = match self.step {
            Step::Mutate => "default",
            Step::Validate => "validate",
        };
        format!("{verb}.{}.{GROUP}", self.kind.singular())
    }
}

/// Every webhook capms serves.
pub fn routes() -> Vec<Route> {
    Kind::ALL
        .iter()
        .flat_map(|&kind| {
            [
                Route {
                    kind,
                    step: Step::Mutate,
                },
                Route {
                    kind,
                    step: Step::Validate,
                },
            ]
        })
        .collect()
}

/// What the handlers need.
#[derive(Clone)]
pub struct WebhookState {
    /// For a MetalStackMachine's cluster partition and a cluster's firewall template; None in
    /// unit tests.
    pub client: Option<kube::Client>,
    pub catalog: Arc<CatalogCache>,
    /// Deny instead of admitting with a warning when metal-api cannot be reached.
    pub deny_when_metal_unreachable: bool,
    pub metrics: Arc<crate::metrics::Metrics>,
}

pub fn router(state: WebhookState) -> Router {
    let mut router = Router::new();
    for route in routes() {
        router = router.route(
            &route.path(),
            post(move |State(state): State<WebhookState>, body: Bytes| admit(state, route, body)),
        );
    }
    router.with_state(state)
}

/// The review as the apiserver reads it. kube-core writes the patch as an array of numbers; Go's
/// `[]byte` is canonically a base64 string, so that is what goes on the wire.
fn reply(response: AdmissionResponse) -> Response {
    let mut review = match serde_json::to_value(response.into_review()) {
        Ok(v) => v,
        Err(e) => json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "response": {"uid": "", "allowed": false, "status": {"message": format!("encoding the response: {e}")}}}),
    };
    if let Some(Value::Array(bytes)) = review.pointer("/response/patch") {
        use base64::Engine;
        let raw: Vec<u8> = bytes
            .iter()
            .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect();
        review["response"]["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(raw));
    }
    axum::Json(review).into_response()
}

async fn admit(state: WebhookState, route: Route, body: Bytes) -> Response {
    let started = Instant::now();
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return reply(AdmissionResponse::invalid(format!(
                "malformed AdmissionReview: {e}"
            )));
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            return reply(AdmissionResponse::invalid(format!(
                "AdmissionReview without a usable request: {e}"
            )));
        }
    };
    let operation = format!("{:?}", request.operation).to_uppercase();
    let response = AdmissionResponse::from(&request);
    let response = match decide(&state, route, &request).await {
        Ok(decision) => decision.apply(response),
        Err(message) => response.deny(message),
    };
    let result = if response.allowed {
        "allowed"
    } else {
        "denied"
    };
    state.metrics.admission(
        route.kind.name(),
        route_step(route),
        &operation,
        result,
        started.elapsed(),
    );
    reply(response)
}

fn route_step(route: Route) -> &'static str {
    match route.step {
        Step::Mutate => "mutate",
        Step::Validate => "validate",
    }
}

/// The outcome of one admission, before it becomes an AdmissionResponse.
#[derive(Debug, Default)]
pub struct Decision {
    pub patch: Option<json_patch::Patch>,
    pub warnings: Vec<String>,
}

impl Decision {
    fn apply(self, mut response: AdmissionResponse) -> AdmissionResponse {
        if !self.warnings.is_empty() {
            response.warnings = Some(self.warnings);
        }
        match self.patch {
            Some(p) if !p.0.is_empty() => match response.clone().with_patch(p) {
                Ok(r) => r,
                Err(e) => response.deny(format!("capms could not encode its defaults: {e}")),
            },
            _ => response,
        }
    }
}

fn typed<T: DeserializeOwned>(object: &DynamicObject, what: &str) -> Result<(Value, T), String> {
    let raw = serde_json::to_value(object).map_err(|e| format!("{what}: {e}"))?;
    let typed = serde_json::from_value(raw.clone())
        .map_err(|e| format!("{what} does not fit the schema: {e}"))?;
    Ok((raw, typed))
}

/// A JSON patch that turns `raw`'s spec into `spec`, leaving everything else as it was.
fn spec_patch<S: Serialize>(raw: &Value, spec: &S) -> Result<json_patch::Patch, String> {
    let mut after = raw.clone();
    after["spec"] = serde_json::to_value(spec).map_err(|e| e.to_string())?;
    Ok(json_patch::diff(raw, &after))
}

/// The partition of a MetalStackMachine's cluster, through its cluster-name label.
async fn cluster_partition(client: &kube::Client, object: &DynamicObject) -> Option<String> {
    let ns = object.namespace()?;
    let cluster_name = object.labels().get(CLUSTER_NAME_LABEL)?.clone();
    let cluster = kube::Api::<Cluster>::namespaced(client.clone(), &ns)
        .get_opt(&cluster_name)
        .await
        .ok()??;
    let infra = cluster.metal_stack_cluster()?;
    let msc = kube::Api::<MetalStackCluster>::namespaced(client.clone(), &ns)
        .get_opt(infra)
        .await
        .ok()??;
    Some(msc.spec.partition)
}

/// A warning, not a denial, when a cluster's firewallTemplateRef names a template that does not
/// exist: manifests may well create the template after the cluster, which then waits for it.
async fn missing_template_warning(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Option<String> {
    let templates = kube::Api::<MetalStackFirewallTemplate>::namespaced(client.clone(), namespace);
    // Only a definite "not found" warns; when the apiserver cannot answer, say nothing.
    if templates.get_opt(name).await.ok()?.is_some() {
        return None;
    }
    crate::controllers::cluster::template_not_found(&templates, namespace, name)
        .await
        .ok()
}

async fn decide(
    state: &WebhookState,
    route: Route,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<Decision, String> {
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        // Deletion is never blocked.
        return Ok(Decision::default());
    }
    if request.kind.kind != route.kind.name() || request.kind.group != GROUP {
        return Err(format!(
            "this webhook handles {}.{GROUP}, not {}.{}",
            route.kind.name(),
            request.kind.kind,
            request.kind.group
        ));
    }
    let object = request
        .object
        .as_ref()
        .ok_or("the AdmissionReview carries no object")?;
    match route.step {
        Step::Mutate => mutate(state, route.kind, object).await,
        Step::Validate => validate(state, route.kind, request, object).await,
    }
}

async fn mutate(
    state: &WebhookState,
    kind: Kind,
    object: &DynamicObject,
) -> Result<Decision, String> {
    let patch = match kind {
        Kind::Cluster => {
            let (raw, mut obj): (Value, MetalStackCluster) = typed(object, "MetalStackCluster")?;
            rules::default_cluster(&mut obj.spec);
            spec_patch(&raw, &obj.spec)?
        }
        Kind::ClusterTemplate => {
            let (raw, mut obj): (Value, MetalStackClusterTemplate) =
                typed(object, "MetalStackClusterTemplate")?;
            rules::default_cluster(&mut obj.spec.template.spec);
            spec_patch(&raw, &obj.spec)?
        }
        Kind::Firewall => {
            let (raw, mut obj): (Value, MetalStackFirewall) = typed(object, "MetalStackFirewall")?;
            rules::default_firewall(&mut obj.spec);
            spec_patch(&raw, &obj.spec)?
        }
        Kind::FirewallTemplate => {
            let (raw, mut obj): (Value, MetalStackFirewallTemplate) =
                typed(object, "MetalStackFirewallTemplate")?;
            rules::default_firewall(&mut obj.spec.template.spec);
            spec_patch(&raw, &obj.spec)?
        }
        Kind::Machine => {
            let (raw, mut obj): (Value, MetalStackMachine) = typed(object, "MetalStackMachine")?;
            let partition = match (&obj.spec.partition, &state.client) {
                (None, Some(client)) => cluster_partition(client, object).await,
                _ => None,
            };
            rules::default_machine(&mut obj.spec, partition.as_deref());
            spec_patch(&raw, &obj.spec)?
        }
        Kind::MachineTemplate => return Ok(Decision::default()),
    };
    Ok(Decision {
        patch: Some(patch),
        warnings: Vec::new(),
    })
}

/// Runs `check` against the catalog; after a miss, once more against a fresher catalog.
async fn with_catalog<F>(state: &WebhookState, check: F) -> Result<Decision, String>
where
    F: Fn(Option<&Catalog>) -> Report,
{
    let Some(cached) = state.catalog.get().await else {
        let mut report = check(None);
        if state.deny_when_metal_unreachable && report.errors.is_empty() {
            return Err("metal-api cannot be reached, so partition, image, machine type and networks cannot be checked; try again".into());
        }
        report.warnings.push("metal-api cannot be reached: partition, image, machine type and networks were not checked".into());
        return finish(report);
    };
    let report = check(Some(&cached));
    if report.errors.is_empty() {
        return finish(report);
    }
    let fresh = state.catalog.refreshed_after_miss(cached).await;
    finish(check(Some(&fresh)))
}

fn finish(report: Report) -> Result<Decision, String> {
    if report.errors.is_empty() {
        Ok(Decision {
            patch: None,
            warnings: report.warnings,
        })
    } else {
        Err(report.message())
    }
}

fn old_typed<T: DeserializeOwned>(
    request: &AdmissionRequest<DynamicObject>,
) -> Result<Option<(Value, T)>, String> {
    request
        .old_object
        .as_ref()
        .map(|o| typed(o, "the old object"))
        .transpose()
}

fn dry_run_exempt(request: &AdmissionRequest<DynamicObject>, object: &DynamicObject) -> bool {
    request.dry_run && object.annotations().contains_key(DRY_RUN_ANNOTATION)
}

async fn validate(
    state: &WebhookState,
    kind: Kind,
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> Result<Decision, String> {
    match kind {
        Kind::Cluster => {
            let (_, obj): (Value, MetalStackCluster) = typed(object, "MetalStackCluster")?;
            let old: Option<(Value, MetalStackCluster)> = old_typed(request)?;
            let mut decision = with_catalog(state, |catalog| {
                let mut report = Report::default();
                rules::validate_cluster(
                    &mut report,
                    "spec",
                    &obj.spec,
                    old.as_ref().map(|(_, o)| &o.spec),
                    catalog,
                );
                report
            })
            .await?;
            let reference = obj.spec.firewall_template_ref.as_ref().filter(|r| {
                old.as_ref()
                    .is_none_or(|(_, o)| o.spec.firewall_template_ref.as_ref() != Some(*r))
            });
            if let (Some(client), Some(reference)) = (&state.client, reference) {
                let ns = object
                    .namespace()
                    .unwrap_or_else(|| request.namespace.clone().unwrap_or_default());
                decision
                    .warnings
                    .extend(missing_template_warning(client, &ns, &reference.name).await);
            }
            Ok(decision)
        }
        Kind::Firewall => {
            let (_, obj): (Value, MetalStackFirewall) = typed(object, "MetalStackFirewall")?;
            let old: Option<(Value, MetalStackFirewall)> = old_typed(request)?;
            let ours = owner_marks_of(OwnerKind::Firewall, &obj);
            with_catalog(state, |catalog| {
                let mut report = Report::default();
                rules::validate_firewall(
                    &mut report,
                    "spec",
                    &obj.spec,
                    old.as_ref().map(|(_, o)| &o.spec),
                    None,
                    catalog,
                    Some(&ours),
                );
                report
            })
            .await
        }
        Kind::Machine => {
            let (_, obj): (Value, MetalStackMachine) = typed(object, "MetalStackMachine")?;
            let old: Option<(Value, MetalStackMachine)> = old_typed(request)?;
            let ours = owner_marks_of(OwnerKind::Machine, &obj);
            with_catalog(state, |catalog| {
                let mut report = Report::default();
                rules::validate_machine(
                    &mut report,
                    "spec",
                    &obj.spec,
                    old.as_ref().map(|(_, o)| &o.spec),
                    catalog,
                    Some(&ours),
                );
                report
            })
            .await
        }
        Kind::ClusterTemplate => {
            validate_template(
                state,
                request,
                object,
                kind,
                |report, t: &MetalStackClusterTemplate, catalog| {
                    rules::validate_cluster(
                        report,
                        "spec.template.spec",
                        &t.spec.template.spec,
                        None,
                        catalog,
                    )
                },
            )
            .await
        }
        Kind::FirewallTemplate => {
            validate_template(
                state,
                request,
                object,
                kind,
                |report, t: &MetalStackFirewallTemplate, catalog| {
                    rules::validate_firewall_template(
                        report,
                        "spec.template.spec",
                        &t.spec.template.spec,
                        catalog,
                    )
                },
            )
            .await
        }
        Kind::MachineTemplate => {
            validate_template(
                state,
                request,
                object,
                kind,
                |report, t: &MetalStackMachineTemplate, catalog| {
                    rules::validate_machine(
                        report,
                        "spec.template.spec",
                        &t.spec.template.spec,
                        None,
                        catalog,
                        None,
                    )
                },
            )
            .await
        }
    }
}

/// A template: immutable except in Cluster API's ClusterClass dry runs, and its
/// `spec.template.spec` checked by `check` like the objects made from it.
async fn validate_template<T: DeserializeOwned>(
    state: &WebhookState,
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
    kind: Kind,
    check: impl Fn(&mut Report, &T, Option<&Catalog>),
) -> Result<Decision, String> {
    let (raw, obj): (Value, T) = typed(object, kind.name())?;
    let old: Option<(Value, T)> = old_typed(request)?;
    let exempt = dry_run_exempt(request, object);
    with_catalog(state, |catalog| {
        let mut report = Report::default();
        if let Some((old_raw, _)) = &old {
            rules::validate_template_update(&mut report, &old_raw["spec"], &raw["spec"], exempt);
        }
        check(&mut report, &obj, catalog);
        report
    })
    .await
}

/// Where the apiserver sends admission requests.
pub enum ClientConfig {
    /// The in-cluster Service (what the install manifests use; cert-manager injects the CA).
    Service { namespace: String, name: String },
    /// A URL (local control planes and tests), with the CA bundle to trust.
    Url { base: String, ca_bundle: Vec<u8> },
}

/// Mutating and Validating webhook configurations for every route.
pub fn webhook_configurations(
    client_config: &ClientConfig,
    cert_annotation: Option<&str>,
) -> [Value; 2] {
    let entries = |step: Step| -> Vec<Value> {
        routes()
            .into_iter()
            .filter(|r| r.step == step)
            .filter(|r| !(r.step == Step::Mutate && r.kind == Kind::MachineTemplate))
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
               "metadata": metadata("capms-mutating-webhook-configuration"), "webhooks": entries(Step::Mutate)}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
               "metadata": metadata("capms-validating-webhook-configuration"), "webhooks": entries(Step::Validate)}),
    ]
}

/// The install manifests of `webhooks/`: the Service in front of the manager's webhook port and
/// both configurations, the CA injected by cert-manager from the `capms-serving-cert` Certificate.
pub fn install_manifests_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "capms-webhook-service", "namespace": "capms-system", "labels": {"cluster.x-k8s.io/provider": "infrastructure-metal-stack"}},
        "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": "webhook-server"}],
                 "selector": {"cluster.x-k8s.io/provider": "infrastructure-metal-stack", "control-plane": "capms-controller-manager"}}
    });
    let config = ClientConfig::Service {
        namespace: "capms-system".into(),
        name: "capms-webhook-service".into(),
    };
    let [mutating, validating] =
        webhook_configurations(&config, Some("capms-system/capms-serving-cert"));
    let mut out = String::from(
        "# Generated by `capms webhooks` from the route table the server mounts; do not edit.\n",
    );
    for doc in [service, mutating, validating] {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&doc)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
