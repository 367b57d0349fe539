//! What every admitted kind shares: the handlers' state, one review of one object, the
//! `Admit` trait each kind implements (its defaults and its checks), and how an object is
//! decoded, defaulted into a patch and checked against metal-api's catalog.

use super::decode;
use super::rules::{self, Report};
use crate::api::{MetalStackCluster, MetalStackMachineSpec};
use crate::cache::catalog::CatalogCache;
use crate::cache::catalogs::{Catalogs, agreed};
use crate::cache::size_images::Verdict;
use crate::cache::{pick_all, read_through};
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
use std::collections::BTreeSet;
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
    /// capms's own metal-api's catalog and each credentials Secret's.
    pub catalogs: Arc<Catalogs>,
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
    /// A denial only because the catalog could not be read (why): waiting or mended
    /// credentials help.
    #[error(
        "metal-api's catalog could not be read ({0}), so partition, image, machine type and networks cannot be checked; try again"
    )]
    MetalUnreachable(String),
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

/// Runs `check` against `catalog`; after a miss, once more against a fresher catalog.
async fn with_catalog<F>(
    state: &WebhookState,
    catalog: &Arc<CatalogCache>,
    check: F,
) -> Result<Allowed, Denial>
where
    F: Fn(Option<&Catalog>) -> Report,
{
    let cached = match catalog.get().await {
        Ok(cached) => cached,
        Err(why) => {
            let mut report = check(None);
            if state.deny_when_metal_unreachable && report.errors.is_empty() {
                return Err(Denial::MetalUnreachable(why.to_string()));
            }
            report.warnings.push(format!("metal-api's catalog could not be read ({why}): partition, image, machine type and networks were not checked"));
            return finish(report);
        }
    };
    let report = check(Some(&cached));
    if report.errors.is_empty() {
        return finish(report);
    }
    let fresh = catalog.refreshed_after_miss(cached).await;
    finish(check(Some(&fresh)))
}

/// [`with_catalog`] against the catalog of the metal-api that the credentials Secret `secret`
/// in `namespace` reaches (capms's own without one): each tenant's objects are judged by its
/// own metal-api. Credentials that cannot be used leave the check to when capms acts.
pub(crate) async fn with_catalog_of<F>(
    state: &WebhookState,
    namespace: &str,
    secret: Option<&str>,
    check: F,
) -> Result<Allowed, Denial>
where
    F: Fn(Option<&Catalog>) -> Report,
{
    match state.catalogs.of(namespace, secret).await {
        Ok(catalog) => with_catalog(state, &catalog, check).await,
        Err(e) => {
            let mut report = check(None);
            report.warnings.push(format!(
                "{e}: partition, image, machine type and networks are checked when capms acts, not here"
            ));
            finish(report)
        }
    }
}

/// Once the catalog admitted `allowed`: does metal-api let machines of `spec`'s machine type
/// take its image (its size image constraints)? A refusal names the field `{path}.image` and
/// metal-api's words, which name the constraint. Through API v2, metal-apiserver is asked; when
/// it cannot be, the object is admitted with a warning (denied with
/// `deny_when_metal_unreachable`).
pub(crate) async fn with_size_image_tried(
    state: &WebhookState,
    (namespace, secret): (&str, Option<&str>),
    path: &str,
    spec: &MetalStackMachineSpec,
    mut allowed: Allowed,
) -> Result<Allowed, Denial> {
    let Ok(cache) = state.catalogs.of(namespace, secret).await else {
        return Ok(allowed);
    };
    // Without a catalog, the warning that says so is given already.
    let Ok(catalog) = cache.get().await else {
        return Ok(allowed);
    };
    let ids = catalog.images.iter().map(|i| i.id.as_str());
    let Ok(image) = metal_api::images::resolve(&spec.image, ids) else {
        return Ok(allowed);
    };
    let refused = |message: String| {
        let path = format!("{path}.image");
        Err(Denial::Refused(vec![rules::FieldError { path, message }]))
    };
    match cache
        .size_takes_image(&catalog, &spec.machine_type, image)
        .await
    {
        Verdict::Allowed => Ok(allowed),
        Verdict::Refused(why) => refused(format!(
            "metal-api does not let machines of machine type {:?} take image {:?} ({image}): {why}",
            spec.machine_type, spec.image
        )),
        Verdict::Unknown(why) => {
            let unasked = format!(
                "metal-apiserver could not be asked whether machine type {:?} takes image {image} ({why})",
                spec.machine_type
            );
            if state.deny_when_metal_unreachable {
                return refused(format!("{unasked}; try again"));
            }
            allowed
                .warnings
                .push(format!("{unasked}: checked when capms acts, not here"));
            Ok(allowed)
        }
    }
}

/// The credentials Secret `msc` names, if any.
pub(crate) fn credentials_of(msc: Option<&MetalStackCluster>) -> Option<&str> {
    msc?.spec.credentials_ref.as_ref().map(|r| r.name.as_str())
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
    let check = |catalog: Option<&Catalog>| {
        let mut report = Report::default();
        if let Some(old_spec) = old_spec {
            rules::validate_template_update(&mut report, old_spec, &review.raw["spec"], exempt);
        }
        check(&mut report, template, catalog);
        report
    };
    with_catalog_of_all(review, namespace_credentials(review).await, check).await
}

/// The credentials Secrets whose metal-api judges a template, one per cluster it may serve (none
/// for capms's own metal-api): its cluster's (the cluster-name label), else those the
/// MetalStackClusters of its namespace name. When they cannot be read (a standby replica whose
/// apiserver does not answer), none: capms's own, as for a template of no cluster.
pub(crate) async fn namespace_credentials(review: &Review<'_>) -> BTreeSet<Option<String>> {
    if let Some(msc) = cluster_of(review).await {
        return [credentials_of(Some(&msc)).map(str::to_owned)].into();
    }
    let (state, ns) = (review.state, review.namespace());
    let named = pick_all(
        &state.caches,
        &state.client,
        &ns,
        |m: &MetalStackCluster| Some(credentials_of(Some(m)).map(str::to_owned)),
    );
    match named.await {
        Ok(named) => named.into_iter().collect(),
        Err(e) => {
            tracing::warn!(namespace = %ns, error = %e, "listing the clusters a template may serve failed; checking it against capms's own metal-api");
            BTreeSet::new()
        }
    }
}

/// [`with_catalog_of`] the credentials the clusters in `named` use, when they agree (capms's own
/// when there are none); without a catalog and with a warning when they differ.
pub(crate) async fn with_catalog_of_all<F>(
    review: &Review<'_>,
    named: BTreeSet<Option<String>>,
    check: F,
) -> Result<Allowed, Denial>
where
    F: Fn(Option<&Catalog>) -> Report,
{
    let warning = match agreed(named) {
        Ok(secret) => {
            let ns = review.namespace();
            return with_catalog_of(review.state, &ns, secret.as_deref(), check).await;
        }
        Err(choices) => format!(
            "the MetalStackClusters this template may serve use different metal-api credentials ({}): it is checked when capms acts, not here; label it {CLUSTER_NAME_LABEL}=<cluster> to check it against its cluster's metal-api",
            choices.join(", ")
        ),
    };
    let mut report = check(None);
    report.warnings.push(warning);
    finish(report)
}
