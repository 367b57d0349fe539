//! What each webhook does: defaults (mutate) and checks against metal-api's catalog (validate),
//! per kind.

use super::rules::{self, Report};
use super::{DRY_RUN_ANNOTATION, Decision, Kind, WebhookState, decode, firewall_templates};
use crate::api::{
    MetalStackCluster, MetalStackClusterTemplate, MetalStackFirewall, MetalStackFirewallTemplate,
    MetalStackMachine, MetalStackMachineTemplate,
};
use crate::cache::read_through;
use crate::capi::{CLUSTER_NAME_LABEL, Cluster};
use crate::conversion::Schema;
use crate::ownership::{OwnerKind, firewall_identity, identity_of};
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use metal_api::Catalog;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub(super) fn typed<T: DeserializeOwned + kube::CustomResourceExt>(
    object: &DynamicObject,
    what: &str,
) -> Result<(Value, T), String> {
    let raw = serde_json::to_value(object).map_err(|e| format!("{what}: {e}"))?;
    let typed = decode::decode(&raw).map_err(|misfit| misfit.message())?;
    Ok((raw, typed))
}

/// The fields of `raw` that do not fit `kind`'s type, if any.
fn misfit_of(kind: Kind, raw: &Value) -> Option<decode::Misfit> {
    fn of<T: DeserializeOwned + kube::CustomResourceExt>(raw: &Value) -> Option<decode::Misfit> {
        decode::decode::<T>(raw).err()
    }
    match kind {
        Kind::Cluster => of::<MetalStackCluster>(raw),
        Kind::ClusterTemplate => of::<MetalStackClusterTemplate>(raw),
        Kind::Firewall => of::<MetalStackFirewall>(raw),
        Kind::FirewallTemplate => of::<MetalStackFirewallTemplate>(raw),
        Kind::Machine => of::<MetalStackMachine>(raw),
        Kind::MachineTemplate => of::<MetalStackMachineTemplate>(raw),
    }
}

/// The denial of an object that does not fit its type: every misfit field, and for a new object
/// what the checks say about the rest of it, so that one wrong field hides no other error (an
/// update's rest would be judged against the old object without the fields taken out, and said
/// to change them). None when it fits.
pub(super) async fn misfit(
    state: &WebhookState,
    kind: Kind,
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> Option<String> {
    let raw = serde_json::to_value(object).ok()?;
    let misfit = misfit_of(kind, &raw)?;
    let rest = misfit
        .rest
        .as_ref()
        .filter(|_| request.old_object.is_none())
        .and_then(|rest| serde_json::from_value::<DynamicObject>(rest.clone()).ok());
    let mut message = misfit.message();
    if let Some(rest) = rest
        && let Err(more) = validate(state, kind, request, &rest).await
    {
        message = format!("{message}; {more}");
    }
    Some(message)
}

/// A JSON patch that turns `raw`'s spec into `spec`, leaving everything else as it was.
fn spec_patch<S: Serialize>(raw: &Value, spec: &S) -> Result<json_patch::Patch, String> {
    let mut after = raw.clone();
    after["spec"] = serde_json::to_value(spec).map_err(|e| e.to_string())?;
    Ok(json_patch::diff(raw, &after))
}

/// The partition of a MetalStackMachine's cluster, through its cluster-name label.
async fn cluster_partition(
    state: &WebhookState,
    client: &kube::Client,
    object: &DynamicObject,
) -> Option<String> {
    let ns = object.namespace()?;
    let cluster_name = object.labels().get(CLUSTER_NAME_LABEL)?.clone();
    let cluster: Cluster = read_through(&state.caches, client, &ns, &cluster_name)
        .await
        .ok()??;
    let infra = cluster.metal_stack_cluster()?;
    let msc: MetalStackCluster = read_through(&state.caches, client, &ns, infra)
        .await
        .ok()??;
    Some(msc.spec.partition)
}

/// The defaults of `kind`'s spec, as a patch; `creating` when the object is new.
pub(super) async fn mutate(
    state: &WebhookState,
    (kind, creating): (Kind, bool),
    object: &DynamicObject,
    schema: Schema,
) -> Result<Decision, String> {
    let patch = match kind {
        Kind::Cluster if schema == Schema::GoProvider => {
            let (raw, mut obj): (Value, MetalStackCluster) = typed(object, "MetalStackCluster")?;
            rules::default_go_provider_cluster(&mut obj.spec);
            spec_patch(&raw, &obj.spec)?
        }
        // The Go provider's machines take their cluster's partition, as capms's do when they
        // name none; written down, it would only burden the v1alpha1 object with an annotation.
        Kind::Machine if schema == Schema::GoProvider => return Ok(Decision::default()),
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
            // Only a new machine's partition is written down: a replica Cluster API cloned
            // from a template was never sent here, and writing its partition on a later update
            // would change a field that is fixed once the machine is allocated.
            let partition = match (&obj.spec.partition, &state.client) {
                (None, Some(client)) if creating => cluster_partition(state, client, object).await,
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
pub(super) async fn with_catalog<F>(state: &WebhookState, check: F) -> Result<Decision, String>
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

fn old_typed<T: DeserializeOwned + kube::CustomResourceExt>(
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

pub(super) async fn validate(
    state: &WebhookState,
    kind: Kind,
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> Result<Decision, String> {
    match kind {
        Kind::Cluster => validate_cluster(state, request, object).await,
        Kind::Firewall => validate_firewall(state, request, object).await,
        Kind::Machine => validate_machine(state, request, object).await,
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
        Kind::FirewallTemplate => firewall_templates::validate(state, object).await,
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

/// A MetalStackCluster: its spec against the catalog, and a warning when its firewall
/// template does not exist (yet).
async fn validate_cluster(
    state: &WebhookState,
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> Result<Decision, String> {
    let (_, obj): (Value, MetalStackCluster) = typed(object, "MetalStackCluster")?;
    let old: Option<(Value, MetalStackCluster)> = old_typed(request)?;
    let old_spec = old.as_ref().map(|(_, o)| &o.spec);
    // Only a newly named template is looked up.
    let reference = obj
        .spec
        .firewall_template_ref
        .as_ref()
        .filter(|r| old_spec.is_none_or(|o| o.firewall_template_ref.as_ref() != Some(*r)));
    let ns = object
        .namespace()
        .unwrap_or_else(|| request.namespace.clone().unwrap_or_default());
    let template = match (&state.client, reference) {
        (Some(client), Some(reference)) => {
            firewall_templates::named(state, client, &ns, &reference.name).await
        }
        _ => None,
    };
    let mut decision = with_catalog(state, |catalog| {
        let mut report = Report::default();
        rules::validate_cluster(&mut report, "spec", &obj.spec, old_spec, catalog);
        if let (Some(Ok(template)), Some(catalog)) = (&template, catalog) {
            firewall_templates::check_named(&mut report, template, &obj.spec, catalog);
        }
        report
    })
    .await?;
    if let Some(Err(missing)) = template {
        decision.warnings.push(missing);
    }
    Ok(decision)
}

async fn validate_firewall(
    state: &WebhookState,
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> Result<Decision, String> {
    let (_, obj): (Value, MetalStackFirewall) = typed(object, "MetalStackFirewall")?;
    let old: Option<(Value, MetalStackFirewall)> = old_typed(request)?;
    // A firewall made for a Go provider firewall deployment is known by the deployment's mark.
    let ours = firewall_identity(&obj);
    with_catalog(state, |catalog| {
        let mut report = Report::default();
        let old_spec = old.as_ref().map(|(_, o)| &o.spec);
        rules::validate_firewall(
            &mut report,
            "spec",
            &obj.spec,
            old_spec,
            None,
            catalog,
            Some(&ours),
        );
        report
    })
    .await
}

async fn validate_machine(
    state: &WebhookState,
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> Result<Decision, String> {
    let (_, obj): (Value, MetalStackMachine) = typed(object, "MetalStackMachine")?;
    let old: Option<(Value, MetalStackMachine)> = old_typed(request)?;
    let ours = identity_of(OwnerKind::Machine, &obj);
    with_catalog(state, |catalog| {
        let mut report = Report::default();
        let old_spec = old.as_ref().map(|(_, o)| &o.spec);
        rules::validate_machine(
            &mut report,
            "spec",
            &obj.spec,
            old_spec,
            catalog,
            Some(&ours),
        );
        report
    })
    .await
}

/// A template: immutable except in Cluster API's ClusterClass dry runs, and its
/// `spec.template.spec` checked by `check` like the objects made from it.
async fn validate_template<T: DeserializeOwned + kube::CustomResourceExt>(
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
