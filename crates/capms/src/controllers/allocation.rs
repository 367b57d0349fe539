//! Machines capms allocates in metal-api, for MetalStackMachines and MetalStackFirewalls alike:
//! which machine an object means, finding the one already allocated for it, its health, and
//! freeing exactly what carries the object's owner tags.

use crate::api::MetalStackCluster;
use crate::cache::listings::{BOOTING_MAX_AGE, Query, TEARDOWN_MAX_AGE};
use crate::capi::Cluster;
use crate::ownership::{cluster_id, has_owner_tags, owner_tags};
use crate::reconciler::conditions::Reason;
use crate::reconciler::{Context, Requeue, Result};
use kube::ResourceExt;
use metal_api::ProviderId;
use metal_api::tags::CLUSTER_ID;
use metal_api::types::{Machine, MachineFindRequest, MachineHealth};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The field a preset machine is named in.
pub(crate) const PROVIDER_ID_FIELD: &str = "spec.providerID";

/// Which machine spec.providerID means for allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// The machine capms allocated and wrote into spec.providerID itself: looked up, never
    /// allocated by id.
    pub recorded: Option<String>,
    /// The machine the user chose: allocated by id when it is free.
    pub preset: Option<String>,
}

impl Target {
    /// From spec.providerID; `partition` tells capms' own `metal://<partition>/<id>` apart from
    /// a user's choice. `recorded` is a machine id capms noted in status, if any.
    pub fn of(
        provider_id: Option<&str>,
        partition: &str,
        recorded: Option<&str>,
    ) -> Result<Target, String> {
        let Some(text) = provider_id else {
            return Ok(Target {
                recorded: recorded.map(str::to_owned),
                preset: None,
            });
        };
        let parsed = ProviderId::parse(text).map_err(|e| format!("{PROVIDER_ID_FIELD} {e}"))?;
        if text == ProviderId::format(partition, &parsed.machine_id) && recorded.is_none() {
            return Ok(Target {
                recorded: Some(parsed.machine_id),
                preset: None,
            });
        }
        Ok(Target {
            recorded: recorded.map(str::to_owned),
            preset: (recorded != Some(parsed.machine_id.as_str())).then_some(parsed.machine_id),
        })
    }
}

/// What metal-api holds for an object, as observed.
#[derive(Clone, Debug, PartialEq)]
pub enum Found {
    /// Allocated for this object: by the recorded id, the preset one or the owner tags.
    Ours(Arc<Machine>),
    /// Nothing allocated for it yet (a preset machine is free).
    Nothing,
    /// spec.providerID names a machine metal-api does not know.
    PresetMissing(String),
    /// spec.providerID names a machine allocated to someone else.
    PresetTaken {
        id: String,
        name: String,
        project: String,
    },
    /// The machine capms allocated for the object was freed, reassigned or deleted outside
    /// capms: reported, never replaced behind Cluster API's back.
    Lost(Lost),
}

/// How a machine capms allocated went away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    Freed(String),
    Reassigned { id: String, name: String },
    Deleted(String),
}

impl Lost {
    /// What happened and, after it, `remedy`.
    pub fn message(&self, remedy: &str) -> String {
        let what = match self {
            Lost::Freed(id) => format!("machine {id} was freed outside capms"),
            Lost::Reassigned { id, name } => {
                format!("machine {id} was allocated to {name:?} outside capms")
            }
            Lost::Deleted(id) => format!("machine {id} no longer exists in metal-api"),
        };
        format!("{what}; capms does not replace it on its own: {remedy}")
    }
}

impl Found {
    /// The message naming the field, for a preset capms cannot use.
    pub(crate) fn preset_problem(&self) -> Option<String> {
        match self {
            Found::PresetMissing(id) => Some(format!(
                "{PROVIDER_ID_FIELD}: machine {id} does not exist in metal-api"
            )),
            Found::PresetTaken { id, name, project } => Some(format!(
                "{PROVIDER_ID_FIELD}: machine {id} is already allocated to {name:?} in project {project}"
            )),
            Found::Ours(_) | Found::Nothing | Found::Lost(_) => None,
        }
    }
}

/// The query of `msc`'s cluster for one of its objects; `ready` objects accept older listings
/// (half the sync period), booting ones [`BOOTING_MAX_AGE`].
pub fn query(ctx: &Context, msc: &MetalStackCluster, ready: bool) -> Query {
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
pub async fn lookup(
    ctx: &Context,
    marks: &BTreeMap<String, String>,
    target: &Target,
    role: &str,
    query: &Query,
) -> Result<Found> {
    if let Some(id) = &target.preset
        && target.recorded.is_none()
    {
        return preset(ctx, marks, id).await;
    }
    let machines = ctx.listings.machines(&ctx.metal, query).await?;
    let ours = |m: &&Arc<Machine>| {
        m.allocation.as_ref().is_some_and(|a| a.role == role) && has_owner_tags(&m.tags, marks)
    };
    let lost = match &target.recorded {
        Some(id) => match machines.iter().find(|m| &m.id == id).filter(ours) {
            Some(m) => return Ok(Found::Ours(m.clone())),
            // Not in the cluster's listing any more: ask for the machine itself, to say what
            // happened to it.
            None => match still_ours(ctx, id, marks).await? {
                Ok(m) => return Ok(Found::Ours(Arc::new(m))),
                Err(lost) => Some(lost),
            },
        },
        None => None,
    };
    if let Some(id) = &target.preset {
        return preset(ctx, marks, id).await;
    }
    Ok(match (machines.iter().find(ours), lost) {
        (Some(m), _) => Found::Ours(m.clone()),
        (None, Some(lost)) => Found::Lost(lost),
        (None, None) => Found::Nothing,
    })
}

/// The machine spec.providerID names: ours, free, taken or missing.
async fn preset(ctx: &Context, marks: &BTreeMap<String, String>, id: &str) -> Result<Found> {
    let m = match ctx.metal.machine(id).await {
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

/// Machine `id` when it is still allocated for the object with `marks`, else how it was lost.
async fn still_ours(
    ctx: &Context,
    id: &str,
    marks: &BTreeMap<String, String>,
) -> Result<Result<Machine, Lost>> {
    let m = match ctx.metal.machine(id).await {
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

/// The machine an object names: the one recorded in its status, else the one its providerID
/// names.
pub(crate) fn named_machine(provider_id: Option<&str>, recorded: Option<&str>) -> Option<String> {
    let named = || ProviderId::parse(provider_id?).ok().map(|p| p.machine_id);
    recorded.map(str::to_owned).or_else(named)
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
pub async fn owned(
    ctx: &Context,
    marks: &BTreeMap<String, String>,
    query: Option<&Query>,
    named: Option<&str>,
) -> Result<Vec<String>> {
    let Some(query) = query else {
        return owned_by_marks(ctx, marks).await;
    };
    let found = ctx.listings.machines(&ctx.metal, query).await?;
    let ours = |m: &Machine| m.allocation.is_some() && has_owner_tags(&m.tags, marks);
    let mut ids: Vec<String> = found
        .iter()
        .filter(|m| ours(m))
        .map(|m| m.id.clone())
        .collect();
    let unlisted = |id: &&str| !found.iter().any(|m| m.id == *id);
    let just_freed = |id: &&str| ctx.listings.freed_by_capms(id, marks);
    if let Some(id) = named.filter(|id| unlisted(id) && !just_freed(id)) {
        match ctx.metal.machine(id).await {
            Ok(m) if ours(&m) => ids.push(m.id),
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if ids.is_empty() && named.is_none() {
        tracing::debug!(marks = ?marks, "the cluster's listing shows a deleted object no machine; asking metal-api");
        let confirmed = owned_by_marks(ctx, marks).await?;
        if !confirmed.is_empty() {
            tracing::warn!(machines = ?confirmed, marks = ?marks, cluster = %query.cluster_tag, "metal-api holds machines carrying a deleted object's owner tags that its cluster's listing did not show; freeing them");
        }
        return Ok(confirmed);
    }
    ids.sort();
    Ok(ids)
}

/// The ids of the allocated machines carrying `marks`, as metal-api answers now.
async fn owned_by_marks(ctx: &Context, marks: &BTreeMap<String, String>) -> Result<Vec<String>> {
    let find = MachineFindRequest {
        tags: owner_tags(marks),
        ..Default::default()
    };
    let found = ctx
        .metal
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

/// Frees machine `id`, allocated for `obj` (which `marks` find), and says so in an event on
/// `obj` (`what`: "Machine" or "Firewall").
pub async fn free<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    marks: &BTreeMap<String, String>,
    id: &str,
    what: &str,
) -> Result<()> {
    if release(ctx, marks, id).await? {
        let note = format!("freed {} {id}", what.to_lowercase());
        ctx.events
            .note(obj, &format!("{what}Freed"), &format!("Free{what}"), note);
    }
    Ok(())
}

/// Frees machine `id`, allocated for the object `marks` find, in metal-api and in the
/// listings; false when metal-api no longer had it.
pub async fn release(ctx: &Context, marks: &BTreeMap<String, String>, id: &str) -> Result<bool> {
    match ctx.metal.machine_free(id).await {
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
pub fn announce<K: kube::Resource<DynamicType = ()>>(
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

/// When to look again at a machine that is not ready: a provisioning machine soon (it is about
/// to progress), a failing one with the growing backoff (a person has to act).
pub(crate) fn health_requeue(health: &MachineHealth) -> Requeue {
    match health {
        MachineHealth::Ready => Requeue::Resync,
        MachineHealth::Provisioning(_) => Requeue::Booting,
        MachineHealth::CrashLoop | MachineHealth::FailedReclaim | MachineHealth::NotAlive(_) => {
            Requeue::Poll
        }
    }
}

/// (healthy, reason, message) of the health condition.
pub(crate) fn health_condition(health: &MachineHealth) -> (bool, Reason, String) {
    match health {
        MachineHealth::Ready => (true, Reason::PhonedHome, "the machine has phoned home and is alive".into()),
        MachineHealth::Provisioning(event) => (true, Reason::Provisioning, format!("provisioning; last event: {event}")),
        MachineHealth::CrashLoop => (false, Reason::CrashLoop, "the machine is in a crash loop (it PXE-boots again instead of phoning home); check its console in metal-stack".into()),
        MachineHealth::FailedReclaim => (false, Reason::FailedReclaim, "the machine phoned home after it was freed: its reclaim failed; an operator must reinstall it".into()),
        MachineHealth::NotAlive(l) => (false, Reason::NotAlive, format!("the machine phoned home but its liveliness is {l}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "e0ab02d2-27cd-5a5e-8efc-080ba80cf258";

    #[test]
    fn the_target_tells_capms_own_provider_id_from_a_users_choice() {
        let none = Target::of(None, "fra", None).expect("no providerID");
        assert_eq!(none, Target::default());
        let own = Target::of(Some(&format!("metal://fra/{ID}")), "fra", None).expect("own");
        assert_eq!(own.recorded.as_deref(), Some(ID));
        assert_eq!(own.preset, None);
        for chosen in [format!("metalstack://{ID}"), format!("metal://nbg/{ID}")] {
            let t = Target::of(Some(&chosen), "fra", None).expect("chosen");
            assert_eq!(
                (t.recorded, t.preset.as_deref()),
                (None, Some(ID)),
                "{chosen}"
            );
        }
        let noted =
            Target::of(Some(&format!("metalstack://{ID}")), "fra", Some(ID)).expect("noted");
        assert_eq!((noted.recorded.as_deref(), noted.preset), (Some(ID), None));
        let bad = Target::of(Some("metal:/x"), "fra", None).expect_err("malformed");
        assert!(bad.contains("spec.providerID"), "{bad}");
    }

    #[test]
    fn a_preset_capms_cannot_use_is_named_with_its_field() {
        let missing = Found::PresetMissing(ID.into())
            .preset_problem()
            .expect("missing");
        assert!(
            missing.starts_with("spec.providerID: machine") && missing.contains("does not exist")
        );
        let taken = Found::PresetTaken {
            id: ID.into(),
            name: "other".into(),
            project: "p".into(),
        };
        let message = taken.preset_problem().expect("taken");
        assert!(
            message.contains("already allocated to \"other\" in project p"),
            "{message}"
        );
        assert_eq!(Found::Nothing.preset_problem(), None);
    }

    #[test]
    fn health_reads_as_a_condition_and_a_requeue() {
        let (healthy, reason, _) = health_condition(&MachineHealth::CrashLoop);
        assert_eq!((healthy, reason), (false, Reason::CrashLoop));
        assert_eq!(
            health_requeue(&MachineHealth::Provisioning("Installing".into())),
            Requeue::Booting
        );
        assert_eq!(health_requeue(&MachineHealth::Ready), Requeue::Resync);
        assert_eq!(
            health_requeue(&MachineHealth::NotAlive("Dead".into())),
            Requeue::Poll
        );
    }
}
