//! Admission webhooks: one route per kind and operation, in the kubebuilder path scheme. The same
//! route table mounts the handlers and generates the webhook configurations in `webhooks/`.

mod admission;
mod decode;
mod firewall_templates;

mod manifests;
pub mod rules;

pub use manifests::{ClientConfig, install_manifests_yaml, webhook_configurations};

use crate::cache::catalog::CatalogCache;
use crate::conversion::{Schema, paths};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
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
    /// The controllers' caches, read instead of the apiserver once they are filled.
    pub caches: crate::cache::Caches,
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
    if spec_unchanged(request, object) {
        return Ok(Decision::default());
    }
    // A v1alpha1 object (the Go provider's API) reaches the webhook converted to v1alpha4; what
    // is said about it names its fields as v1alpha1 has them.
    let schema = request
        .request_kind
        .as_ref()
        .and_then(|k| Schema::of(&k.version))
        .unwrap_or(Schema::Capms);
    let in_schema = |message: String| paths::in_schema(route.kind.name(), schema, &message);
    let decided = match route.step {
        Step::Mutate => {
            let creating = matches!(request.operation, Operation::Create);
            admission::mutate(state, (route.kind, creating), object, schema).await
        }
        Step::Validate => admission::validate(state, route.kind, request, object)
            .await
            .map(|mut decision| {
                decision.warnings = decision.warnings.into_iter().map(in_schema).collect();
                decision
            })
            .map_err(in_schema),
    };
    // Only a denial can come from an object that does not fit its type: then it names every
    // misfit field and what the checks say about the rest.
    let Err(denial) = decided else {
        return decided;
    };
    match admission::misfit(state, route.kind, request, object).await {
        Some(misfit) => Err(in_schema(misfit)),
        None => Err(denial),
    }
}

/// An update that leaves the spec as it was (finalizers, labels, owner references): capms has
/// nothing to default or check in it. Checking it anyway would, say, deny removing a finalizer
/// once the machine's image has left metal-api's catalog, and hold up the deletion for good.
/// The webhook configurations skip such updates too (`matchConditions`), when the apiserver
/// evaluates them.
fn spec_unchanged(request: &AdmissionRequest<DynamicObject>, object: &DynamicObject) -> bool {
    matches!(request.operation, Operation::Update)
        && request
            .old_object
            .as_ref()
            .is_some_and(|old| old.data.get("spec") == object.data.get("spec"))
}

#[cfg(test)]
mod tests;
