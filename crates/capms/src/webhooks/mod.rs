//! Admission webhooks: one route per admitted kind and phase (`routes`), each kind's defaults
//! and checks in its file of `kinds/` (the `Admit` trait). The same route table mounts the
//! handlers and generates the webhook configurations in `webhooks/`.

mod admit;
mod decode;
mod kinds;
mod manifests;
mod routes;
mod rules;

pub use admit::AdmissionPhase;
pub use admit::WebhookState;
pub use kinds::AdmittedKind;
pub use manifests::{ClientConfig, install_manifests_yaml, webhook_configurations};
pub use routes::{Route, routes};

use crate::api::common::GROUP;
use crate::conversion::{Schema, paths};
use admit::{Allowed, Denial, Review};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::{Value, json};
use std::time::Instant;

/// Mounts every route on one router.
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
        Ok(allowed) => allowed.apply(response),
        Err(denial) => denied(response, route, &request, &denial),
    };
    let result = if response.allowed {
        "allowed"
    } else {
        "denied"
    };
    state.metrics.admission(
        route.kind.name(),
        route.phase.verb(),
        &operation,
        result,
        started.elapsed(),
    );
    reply(response)
}

/// The denial's message, and its refused fields as the status's causes.
fn denied(
    response: AdmissionResponse,
    route: Route,
    request: &AdmissionRequest<DynamicObject>,
    denial: &Denial,
) -> AdmissionResponse {
    let causes = denial.causes();
    let mut response = response.deny(denial.to_string());
    if !causes.is_empty() {
        let name = request.name.clone();
        response.result.details = Some(kube::core::response::StatusDetails {
            name,
            group: GROUP.to_owned(),
            kind: route.kind.name().to_owned(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        });
    }
    response
}

impl Allowed {
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
) -> Result<Allowed, Denial> {
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        // Deletion is never blocked.
        return Ok(Allowed::default());
    }
    if request.kind.kind != route.kind.name() || request.kind.group != GROUP {
        return Err(Denial::Malformed(format!(
            "this webhook handles {}.{GROUP}, not {}.{}",
            route.kind.name(),
            request.kind.kind,
            request.kind.group
        )));
    }
    let no_object = || Denial::Malformed("the AdmissionReview carries no object".into());
    let object = request.object.as_ref().ok_or_else(no_object)?;
    if spec_unchanged(request, object) {
        return Ok(Allowed::default());
    }
    let encoded = |o: &DynamicObject| {
        serde_json::to_value(o)
            .map_err(|e| Denial::Malformed(format!("{}: {e}", route.kind.name())))
    };
    // A v1alpha1 object (the Go provider's API) reaches the webhook converted to v1alpha4; what
    // is said about it names its fields as v1alpha1 has them.
    let schema = request
        .request_kind
        .as_ref()
        .and_then(|k| Schema::of(&k.version))
        .unwrap_or(Schema::Capms);
    let review = Review {
        state,
        request,
        object,
        raw: encoded(object)?,
        old_raw: request.old_object.as_ref().map(encoded).transpose()?,
        schema,
    };
    let in_schema = |message: &str| paths::in_schema(route.kind.name(), schema, message);
    let decided = kinds::review(route.kind, route.phase, &review).await;
    match (decided, route.phase) {
        (Ok(mut allowed), AdmissionPhase::Validating) => {
            allowed.warnings = allowed.warnings.iter().map(|w| in_schema(w)).collect();
            Ok(allowed)
        }
        (Ok(allowed), AdmissionPhase::Mutating) => Ok(allowed),
        (Err(denial), _) => Err(denial.renamed(in_schema)),
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
