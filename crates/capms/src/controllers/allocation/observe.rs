//! Reads: the cluster's listing query, the machine allocated for an object, and for deletion
//! every machine carrying the object's owner tags.

use super::facts::{Found, Lost, Target};
use crate::api::MetalStackCluster;
use crate::cache::listings::{BOOTING_MAX_AGE, Query, TEARDOWN_MAX_AGE};
use crate::capi::Cluster;
use crate::ownership::{cluster_id, has_owner_tags, owner_tags};
use crate::reconciler::{Context, Result};
use kube::ResourceExt;
use metal_api::types::{Machine, MachineFindRequest};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The query of `msc`'s cluster for one of its objects; `ready` objects accept older listings
/// (half the sync period), booting ones [`BOOTING_MAX_AGE`].
pub(crate) fn query(ctx: &Context, msc: &MetalStackCluster, ready: bool) -> Query {
    let max_age = match ready {
        true => ctx.settings.sync_period / 2,
        false => BOOTING_MAX_AGE,
    };
    let id = cluster_id(&msc.namespace().unwrap_or_default(), &msc.name_any());
    Query::of_cluster(&id, max_age)
}

/// The query for deleting an object of MetalStackCluster `name`'s cluster.
pub fn teardown_query(namespace: &str, name: &str) -> Query {
    Query::of_cluster(&cluster_id(namespace, name), TEARDOWN_MAX_AGE)
}

/// The query for deleting an object of Cluster `cluster` in `namespace`, while the Cluster and
/// its MetalStackCluster are there (they wait for their machines and firewall to go).
pub(crate) async fn teardown_query_of(
    ctx: &Context,
    namespace: &str,
    cluster: Option<&str>,
) -> Result<Option<Query>> {
    let Some(cluster) = cluster else {
        return Ok(None);
    };
    let cluster = ctx.get::<Cluster>(namespace, cluster).await?;
    Ok(cluster
        .as_ref()
        .and_then(|c| c.metal_stack_cluster())
        .map(|msc| teardown_query(namespace, msc)))
}

/// Observes the machine allocated for the object with `marks`: the recorded one, the preset
/// one, or the one its owner tags find with `role` (machine or firewall), from the cluster's
/// listing (one find shared by the cluster's objects).
pub(crate) async fn lookup(
    ctx: &Context,
    metal: &metal_api::Client,
    marks: &BTreeMap<String, String>,
    target: &Target,
    role: &str,
    query: &Query,
) -> Result<Found> {
    if let Some(id) = &target.preset
        && target.recorded.is_none()
    {
        return preset(metal, marks, id).await;
    }
    let machines = ctx.listings.machines(metal, query).await?;
    let ours = |m: &&Arc<Machine>| {
        m.allocation.as_ref().is_some_and(|a| a.role == role) && has_owner_tags(&m.tags, marks)
    };
    let lost = match &target.recorded {
        Some(id) => match machines.iter().find(|m| &m.id == id).filter(ours) {
            Some(m) => return Ok(Found::Ours(m.clone())),
            // Not in the cluster's listing any more: ask for the machine itself, to say what
            // happened to it.
            None => match still_ours(metal, id, marks).await? {
                Ok(m) => return Ok(Found::Ours(Arc::new(m))),
                Err(lost) => Some(lost),
            },
        },
        None => None,
    };
    if let Some(id) = &target.preset {
        return preset(metal, marks, id).await;
    }
    Ok(match (machines.iter().find(ours), lost) {
        (Some(m), _) => Found::Ours(m.clone()),
        (None, Some(lost)) => Found::Lost(lost),
        (None, None) => Found::Nothing,
    })
}

/// The machine spec.providerID names: ours, free, taken or missing.
async fn preset(
    metal: &metal_api::Client,
    marks: &BTreeMap<String, String>,
    id: &str,
) -> Result<Found> {
    let m = match metal.machine(id).await {
        Ok(m) => m,
        Err(e) if e.is_not_found() => return Ok(Found::PresetMissing(id.to_owned())),
        Err(e) => return Err(e.into()),
    };
    Ok(match &m.allocation {
        Some(_) if has_owner_tags(&m.tags, marks) => Found::Ours(Arc::new(m)),
        Some(a) => Found::PresetTaken {
            id: m.id.clone(),
            name: a.name.clone(),
            project: a.project.clone(),
        },
        None => Found::Nothing,
    })
}

/// Machine `id` when it is still allocated for the object with `marks`, else how it was lost.
async fn still_ours(
    metal: &metal_api::Client,
    id: &str,
    marks: &BTreeMap<String, String>,
) -> Result<Result<Machine, Lost>> {
    let m = match metal.machine(id).await {
        Ok(m) => m,
        Err(e) if e.is_not_found() => return Ok(Err(Lost::Deleted(id.to_owned()))),
        Err(e) => return Err(e.into()),
    };
    Ok(match &m.allocation {
        Some(_) if has_owner_tags(&m.tags, marks) => Ok(m),
        Some(a) => Err(Lost::Reassigned {
            id: id.to_owned(),
            name: a.name.clone(),
        }),
        None => Err(Lost::Freed(id.to_owned())),
    })
}

/// Observes, for deletion, the ids of every allocated machine that carries `marks`, and only
/// those: capms never frees a machine it did not allocate for this object. Every machine capms
/// allocates carries its cluster's tag, so with the cluster's `listing` known the cluster's
/// shared find answers (a cluster's objects go together); without it, a find by the marks. The
/// machine the object names (`named`) is asked for too when the listing lacks it: one the Go
/// provider allocated carries another cluster tag, and is taken over all the same. One capms
/// freed in the last minutes (and has not allocated again) is not asked for: the free is why
/// the listing lacks it, metal-api would answer it free, and at 1,000 machines deleted together
/// that was a call per machine.
///
/// An empty answer lets the object go, and a machine it leaves behind stays allocated for good.
/// So when the shared listing shows nothing for an object that names no machine, metal-api is
/// asked directly by the marks before the object is let go (an object that names its machine
/// has it asked for by id, unless capms has just freed it). At 1,000 machines, a replica
/// Cluster API deleted (it had made one too many) right after capms allocated for it went, not
/// yet named, with its machine still allocated. Deletions of provisioned objects cost nothing
/// more.
pub(crate) async fn owned(
    ctx: &Context,
    metal: &metal_api::Client,
    marks: &BTreeMap<String, String>,
    query: Option<&Query>,
    named: Option<&str>,
) -> Result<Vec<String>> {
    let Some(query) = query else {
        return owned_by_marks(metal, marks).await;
    };
    let found = ctx.listings.machines(metal, query).await?;
    let ours = |m: &Machine| m.allocation.is_some() && has_owner_tags(&m.tags, marks);
    let mut ids: Vec<String> = found
        .iter()
        .filter(|m| ours(m))
        .map(|m| m.id.clone())
        .collect();
    let unlisted = |id: &&str| !found.iter().any(|m| m.id == *id);
    let just_freed = |id: &&str| ctx.listings.freed_by_capms(id, marks);
    if let Some(id) = named.filter(|id| unlisted(id) && !just_freed(id)) {
        match metal.machine(id).await {
            Ok(m) if ours(&m) => ids.push(m.id),
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if ids.is_empty() && named.is_none() {
        tracing::debug!(marks = ?marks, "the cluster's listing shows a deleted object no machine; asking metal-api");
        let confirmed = owned_by_marks(metal, marks).await?;
        if !confirmed.is_empty() {
            tracing::warn!(machines = ?confirmed, marks = ?marks, cluster = %query.cluster_tag, "metal-api holds machines carrying a deleted object's owner tags that its cluster's listing did not show; freeing them");
        }
        return Ok(confirmed);
    }
    ids.sort();
    Ok(ids)
}

/// The ids of the allocated machines carrying `marks`, as metal-api answers now.
async fn owned_by_marks(
    metal: &metal_api::Client,
    marks: &BTreeMap<String, String>,
) -> Result<Vec<String>> {
    let find = MachineFindRequest {
        tags: owner_tags(marks),
        ..Default::default()
    };
    let found = metal
        .machine_find_as::<metal_api::MachineSummary>(&find)
        .await?;
    let mut ids: Vec<String> = found
        .into_iter()
        .filter(|m| m.allocation.is_some() && has_owner_tags(&m.tags, marks))
        .map(|m| m.id)
        .collect();
    ids.sort();
    Ok(ids)
}
