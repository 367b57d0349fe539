//! What every admitted kind shares: the handlers' state, one review of one object, the
//! `Admit` trait each kind implements (its defaults and its checks), and how an object is
//! decoded, defaulted into a patch and checked against metal-api's catalog.

use super::decode;
use super::rules::{self, Report};
use crate::api::MetalStackCluster;
use crate::cache::catalog::CatalogCache;
use crate::cache::read_through;
use crate::capi::{CLUSTER_NAME_LABEL, Cluster};
use crate::conversion::Schema;
use kube::CustomResourceExt;
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use metal_api::Catalog;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;

/// Annotation of Cluster API's ClusterClass dry runs, exempt from template immutability.
pub(crate) const DRY_RUN_ANNOTATION: &str = "topology.cluster.x-k8s.io/dry-run";

/// The two phases of admission control: the apiserver calls every mutating webhook, then every
/// validating one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionPhase {
    /// Defaults are written into the object (a JSON patch).
    Mutating,
    /// The object is checked, against metal-api's catalog among others.
    Validating,
}

impl AdmissionPhase {
    /// As a path segment and a metric label.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            AdmissionPhase::Mutating => "mutate",
            AdmissionPhase::Validating => "validate",
        }
    }
}

/// What the handlers need.
#[derive(Clone)]
pub struct WebhookState {
    /// For a MetalStackMachine's cluster partition, a cluster's firewall template and the
    /// clusters using a firewall template.
    pub client: kube::Client,
    /// The controllers' caches, read instead of the apiserver once they are filled.
    pub caches: crate::cache::Caches,
    pub catalog: Arc<CatalogCache>,
    /// Deny instead of admitting with a warning when metal-api cannot be reached.
    pub deny_when_metal_unreachable: bool,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// An admitted object: the defaults as a patch, and warnings for the person who wrote it.
#[derive(Debug, Default)]
pub(crate) struct Allowed {
    pub(crate) patch: Option<json_patch::Patch>,
    pub(crate) warnings: Vec<String>,
}

/// Why an object is denied. Each message names the field and, where there are, the valid
/// choices.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Denial {
    /// The request itself is unusable (not the object's fault).
    #[error("{0}")]
    Malformed(String),
    /// Fields that do not fit the kind's type.
    #[error("{0}")]
    Misfit(String),
    /// The kind's rules refuse it, field by field.
    #[error("{}", rules::joined(.0))]
    Refused(Vec<rules::FieldError>),
    /// A denial only because the catalog could not be read: waiting helps.
    #[error(
        "metal-api cannot be reached, so partition, image, machine type and networks cannot be checked; try again"
    )]
    MetalUnreachable,
    #[error("capms could not encode its defaults: {0}")]
    Encoding(String),
}

impl Denial {
    /// The denial with the object's field paths said by `rename` (the object's own schema).
    pub(crate) fn renamed(self, rename: impl Fn(&str) -> String) -> Denial {
        match self {
            Denial::Misfit(m) => Denial::Misfit(rename(&m)),
            Denial::Refused(errors) => Denial::Refused(
                errors
                    .into_iter()
                    .map(|e| rules::FieldError {
                        path: rename(&e.path),
                        message: rename(&e.message),
                    })
                    .collect(),
            ),
            other => other,
        }
    }

    /// The refused fields, each with what is wrong with it, as the apiserver passes them on in
    /// its answer's `details.causes`. Clients that show only the causes of a refusal (Cluster
    /// API's topology controller, in a Cluster's `TopologyReconciled` condition) still name
    /// the field and the valid choices.
    pub(crate) fn causes(&self) -> Vec<kube::core::response::StatusCause> {
        let Denial::Refused(errors) = self else {
            return Vec::new();
        };
        errors
            .iter()
            .map(|e| kube::core::response::StatusCause {
                reason: "FieldValueInvalid".into(),
                message: e.message.clone(),
                field: e.path.clone(),
            })
            .collect()
    }
}

/// One admission review of one object.
pub(crate) struct Review<'a> {
    pub(crate) state: &'a WebhookState,
    pub(crate) request: &'a AdmissionRequest<DynamicObject>,
    pub(crate) object: &'a DynamicObject,
    /// The object as JSON, as it came.
    pub(crate) raw: Value,
    /// The object before an update, as JSON.
    pub(crate) old_raw: Option<Value>,
    /// The schema the object was written in (its fields are named so in every message).
    pub(crate) schema: Schema,
}

impl Review<'_> {
    pub(crate) fn creating(&self) -> bool {
        matches!(self.request.operation, Operation::Create)
    }

    pub(crate) fn namespace(&self) -> String {
        let from_request = || self.request.namespace.clone().unwrap_or_default();
        self.object.namespace().unwrap_or_else(from_request)
    }

    /// A ClusterClass dry run of Cluster API's topology controller.
    pub(crate) fn dry_run_exempt(&self) -> bool {
        self.request.dry_run && self.object.annotations().contains_key(DRY_RUN_ANNOTATION)
    }
}

/// What capms's webhooks do for one kind: its defaults and its checks. Each admitted kind
/// implements it in a file of `kinds/`.
pub(crate) trait Admit:
    DeserializeOwned + Serialize + CustomResourceExt + Send + Sync
{
    /// Whether the mutating webhook sets defaults on objects written in `schema`.
    fn defaulted_in(_schema: Schema) -> bool {
        true
    }

    /// Sets the object's defaults in place.
    fn default(&mut self, _review: &Review<'_>) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Checks the object (and the change from `old`, on an update).
    fn validate(
        &self,
        old: Option<&Self>,
        review: &Review<'_>,
    ) -> impl Future<Output = Result<Allowed, Denial>> + Send;
}

/// The object decoded into `K`, or every field of it that does not fit.
fn decoded<K: Admit>(raw: &Value) -> Result<K, decode::Misfit> {
    decode::decode(raw)
}

/// The defaults of a `K`, as a patch of its spec.
pub(crate) async fn mutate<K: Admit>(review: &Review<'_>) -> Result<Allowed, Denial> {
    if !K::defaulted_in(review.schema) {
        return Ok(Allowed::default());
    }
    let mut object: K = decoded(&review.raw).map_err(|m| Denial::Misfit(m.message()))?;
    object.default(review).await;
    let encoded = serde_json::to_value(&object).map_err(|e| Denial::Encoding(e.to_string()))?;
    let mut after = review.raw.clone();
    after["spec"] = encoded["spec"].clone();
    Ok(Allowed {
        patch: Some(json_patch::diff(&review.raw, &after)),
        warnings: Vec::new(),
    })
}

/// The checks of a `K` (and of the change from the old object).
pub(crate) async fn validate<K: Admit>(review: &Review<'_>) -> Result<Allowed, Denial> {
    let object: K = decoded(&review.raw).map_err(|m| Denial::Misfit(m.message()))?;
    let old: Option<K> = match &review.old_raw {
        Some(old) => Some(decoded(old).map_err(|m| Denial::Misfit(m.message()))?),
        None => None,
    };
    object.validate(old.as_ref(), review).await
}

/// The denial of a `K` that does not fit its type: every misfit field, and for a new object
/// what the checks say about the rest of it, so that one wrong field hides no other error (an
/// update's rest would be judged against the old object without the fields taken out, and said
/// to change them). None when it fits.
pub(crate) async fn misfit<K: Admit>(review: &Review<'_>) -> Option<String> {
    let misfit = decoded::<K>(&review.raw).err()?;
    let mut message = misfit.message();
    let rest = misfit.rest.filter(|_| review.old_raw.is_none());
    if let Some(rest) = rest
        && let Ok(rest) = decoded::<K>(&rest)
        && let Err(more) = rest.validate(None, review).await
    {
        message = format!("{message}; {more}");
    }
    Some(message)
}

/// Runs `check` against the catalog; after a miss, once more against a fresher catalog.
pub(crate) async fn with_catalog<F>(state: &WebhookState, check: F) -> Result<Allowed, Denial>
where
    F: Fn(Option<&Catalog>) -> Report,
{
    let Some(cached) = state.catalog.get().await else {
        let mut report = check(None);
        if state.deny_when_metal_unreachable && report.errors.is_empty() {
            return Err(Denial::MetalUnreachable);
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

/// [`with_catalog`] for an object of cluster `msc`: the catalog is of capms's own metal-api,
/// so an object of a cluster naming credentials of its own is checked without it, and its
/// metal-api answers for it when capms acts.
pub(crate) async fn with_catalog_of<F>(
    state: &WebhookState,
    msc: Option<&MetalStackCluster>,
    check: F,
) -> Result<Allowed, Denial>
where
    F: Fn(Option<&Catalog>) -> Report,
{
    let Some(credentials) = msc.and_then(|m| m.spec.credentials_ref.as_ref()) else {
        return with_catalog(state, check).await;
    };
    let mut report = check(None);
    report.warnings.push(format!(
        "the cluster uses the metal-api credentials of Secret {}: partition, image, machine type and networks are checked against that metal-api when capms acts, not here",
        credentials.name
    ));
    finish(report)
}

/// The MetalStackCluster of the object under review, through its cluster-name label.
pub(crate) async fn cluster_of(review: &Review<'_>) -> Option<MetalStackCluster> {
    let (state, client) = (review.state, &review.state.client);
    let ns = review.object.namespace()?;
    let cluster_name = review.object.labels().get(CLUSTER_NAME_LABEL)?.clone();
    let cluster: Cluster = read_through(&state.caches, client, &ns, &cluster_name)
        .await
        .ok()??;
    let infra = cluster.metal_stack_cluster()?;
    read_through(&state.caches, client, &ns, infra).await.ok()?
}

fn finish(report: Report) -> Result<Allowed, Denial> {
    if report.errors.is_empty() {
        Ok(Allowed {
            patch: None,
            warnings: report.warnings,
        })
    } else {
        Err(Denial::Refused(report.errors))
    }
}

/// A template: immutable except in Cluster API's ClusterClass dry runs, and its
/// `spec.template.spec` checked by `check` like the objects made from it.
pub(crate) async fn validate_template<T: Admit>(
    template: &T,
    old: Option<&T>,
    review: &Review<'_>,
    check: impl Fn(&mut Report, &T, Option<&Catalog>),
) -> Result<Allowed, Denial> {
    let old_spec = old.and(review.old_raw.as_ref()).map(|raw| &raw["spec"]);
    let exempt = review.dry_run_exempt();
    with_catalog(review.state, |catalog| {
        let mut report = Report::default();
        if let Some(old_spec) = old_spec {
            rules::validate_template_update(&mut report, old_spec, &review.raw["spec"], exempt);
        }
        check(&mut report, template, catalog);
        report
    })
    .await
}
