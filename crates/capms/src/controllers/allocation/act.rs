//! Writes: recording an allocation in the listings, freeing exactly what carries an object's
//! owner tags, and announcing the outcome on the object.

use crate::reconciler::{Context, Result};
use metal_api::tags::CLUSTER_ID;
use metal_api::types::Machine;
use std::collections::BTreeMap;

/// An allocation with `tags` was attempted: the machine it returned goes into the cluster's
/// listing; when it failed (metal-api may still have allocated) the listings from before are
/// not used again.
pub async fn allocated(
    ctx: &Context,
    tags: &[String],
    result: &std::result::Result<Machine, metal_api::Error>,
) {
    let prefix = format!("{CLUSTER_ID}=");
    match (tags.iter().find(|t| t.starts_with(&prefix)), result) {
        (Some(tag), Ok(machine)) => ctx.listings.record(tag, machine).await,
        (Some(tag), Err(_)) => ctx.listings.invalidate(tag),
        // Without a cluster tag no listing can hold it; be safe anyway.
        (None, _) => ctx.listings.invalidate_all(),
    }
}

/// Frees machine `id`, allocated for `obj` (which `marks` find), and says so in an event on
/// `obj` (`what`: "Machine" or "Firewall").
pub async fn free<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    metal: &metal_api::Client,
    obj: &K,
    marks: &BTreeMap<String, String>,
    id: &str,
    what: &str,
) -> Result<()> {
    if release(ctx, metal, marks, id).await? {
        let note = format!("freed {} {id}", what.to_lowercase());
        ctx.events
            .note(obj, &format!("{what}Freed"), &format!("Free{what}"), note);
    }
    Ok(())
}

/// Frees machine `id`, allocated for the object `marks` find, in metal-api and in the
/// listings; false when metal-api no longer had it.
pub(crate) async fn release(
    ctx: &Context,
    metal: &metal_api::Client,
    marks: &BTreeMap<String, String>,
    id: &str,
) -> Result<bool> {
    match metal.machine_free(id).await {
        Ok(_) => {
            ctx.listings.freed(id, marks).await;
            Ok(true)
        }
        Err(e) if e.is_not_found() => {
            ctx.listings.freed(id, marks).await;
            Ok(false)
        }
        Err(e) => {
            // metal-api may have freed it anyway: listings from before are not used again.
            ctx.listings.invalidate_all();
            Err(e.into())
        }
    }
}

/// Publishes the outcome of an allocation on `obj` and passes it on.
pub(crate) fn announce<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    what: &str,
    result: Result<Machine, metal_api::Error>,
    detail: &str,
) -> Result<Machine> {
    let action = format!("Allocate{what}");
    match result {
        Ok(m) => {
            let note = format!("allocated {} {}{detail}", what.to_lowercase(), m.id);
            ctx.events
                .note(obj, &format!("{what}Allocated"), &action, note);
            Ok(m)
        }
        Err(e) => {
            let reason = format!("{what}AllocationFailed");
            ctx.events.warn(obj, &reason, &action, e.to_string());
            Err(e.into())
        }
    }
}
