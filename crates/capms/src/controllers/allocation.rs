//! Machines capms allocates in metal-api, for MetalStackMachines and MetalStackFirewalls alike:
//! which machine an object means, finding the one already allocated for it, its health, and
//! freeing exactly what carries the object's owner tags.

use super::conditions::Reason;
use super::context::*;
use metal_api::ProviderId;
use metal_api::types::{Machine, MachineFindRequest, event, liveliness};
use std::collections::BTreeMap;

/// The field a preset machine is named in.
pub const PROVIDER_ID_FIELD: &str = "spec.providerID";

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
    Ours(std::sync::Arc<Machine>),
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
    pub fn preset_problem(&self) -> Option<String> {
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

/// Where a lookup reads the cluster's machines: its tag, and how old a listing may be (short
/// while a machine boots, half the sync period once it is ready).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    pub cluster_tag: String,
    pub max_age: std::time::Duration,
}

/// How old a listing a booting machine accepts. Each new listing wakes the objects whose machine
/// changed stage, so while a cluster's machines boot, their polls list the cluster about once
/// per this interval and a machine that phoned home is seen within about as long.
pub const BOOTING_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// How old a listing a deleted object accepts to find what it must free. A listing holds
/// capms's own frees, so a cluster's objects going together share one.
pub const TEARDOWN_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(2);

impl Listing {
    /// For an object of `msc`'s cluster; `ready` objects accept older listings.
    pub fn of(ctx: &Context, msc: &crate::api::MetalStackCluster, ready: bool) -> Listing {
        use kube::ResourceExt;
        let mut listing = Listing::teardown(&msc.namespace().unwrap_or_default(), &msc.name_any());
        listing.max_age = if ready {
            ctx.settings.sync_period / 2
        } else {
            BOOTING_MAX_AGE
        };
        listing
    }

    /// For deleting an object of MetalStackCluster `name`'s cluster: at most
    /// [`TEARDOWN_MAX_AGE`] old.
    pub fn teardown(namespace: &str, name: &str) -> Listing {
        Listing {
            cluster_tag: format!("{CLUSTER_ID_KEY}={}", cluster_id(namespace, name)),
            max_age: TEARDOWN_MAX_AGE,
        }
    }

    /// For deleting an object of Cluster `cluster` in `namespace`, while the Cluster and its
    /// MetalStackCluster are there (they wait for their machines and firewall to go).
    pub async fn of_deleted(
        ctx: &Context,
        namespace: &str,
        cluster: Option<&str>,
    ) -> Result<Option<Listing>> {
        let Some(cluster) = cluster else {
            return Ok(None);
        };
        let cluster = ctx.get::<crate::capi::Cluster>(namespace, cluster).await?;
        Ok(cluster
            .as_ref()
            .and_then(|c| c.metal_stack_cluster())
            .map(|msc| Listing::teardown(namespace, msc)))
    }
}

/// Observes the machine allocated for the object with `marks`: the recorded one, the preset
/// one, or the one its owner tags find with `role` (machine or firewall), from the cluster's
/// listing (one find shared by the cluster's objects).
pub async fn lookup(
    ctx: &Context,
    marks: &BTreeMap<String, String>,
    target: &Target,
    role: &str,
    listing: &Listing,
) -> Result<Found> {
    if let Some(id) = &target.preset
        && target.recorded.is_none()
    {
        return preset(ctx, marks, id).await;
    }
    let machines = ctx
        .fleet
        .machines(&ctx.metal, &listing.cluster_tag, listing.max_age)
        .await?;
    let ours = |m: &&std::sync::Arc<Machine>| {
        m.allocation.as_ref().is_some_and(|a| a.role == role) && has_owner_tags(&m.tags, marks)
    };
    let lost = match &target.recorded {
        Some(id) => match machines.iter().find(|m| &m.id == id).filter(ours) {
            Some(m) => return Ok(Found::Ours(m.clone())),
            // Not in the cluster's listing any more: ask for the machine itself, to say what
            // happened to it.
            None => match still_ours(ctx, id, marks).await? {
                Ok(m) => return Ok(Found::Ours(std::sync::Arc::new(m))),
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
        Some(_) if has_owner_tags(&m.tags, marks) => Found::Ours(std::sync::Arc::new(m)),
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
    let prefix = format!("{CLUSTER_ID_KEY}=");
    match (tags.iter().find(|t| t.starts_with(&prefix)), result) {
        (Some(tag), Ok(machine)) => ctx.fleet.record(tag, machine).await,
        (Some(tag), Err(_)) => ctx.fleet.invalidate(tag),
        // Without a cluster tag no listing can hold it; be safe anyway.
        (None, _) => ctx.fleet.invalidate_all(),
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

/// Observes, for deletion, the ids of every allocated machine that carries `marks`, and only
/// those: capms never frees a machine it did not allocate for this object. Every machine capms
/// allocates carries its cluster's tag, so with the cluster's `listing` known the cluster's
/// shared find answers (a cluster's objects go together); without it, a find by the marks.
pub async fn owned(
    ctx: &Context,
    marks: &BTreeMap<String, String>,
    listing: Option<&Listing>,
) -> Result<Vec<String>> {
    let found = match listing {
        Some(l) => {
            ctx.fleet
                .machines(&ctx.metal, &l.cluster_tag, l.max_age)
                .await?
        }
        None => {
            let find = MachineFindRequest {
                tags: owner_tags(marks),
                ..Default::default()
            };
            let found = ctx.metal.machine_find(&find).await?;
            std::sync::Arc::new(found.into_iter().map(std::sync::Arc::new).collect())
        }
    };
    let mut ids: Vec<String> = found
        .iter()
        .filter(|m| m.allocation.is_some() && has_owner_tags(&m.tags, marks))
        .map(|m| m.id.clone())
        .collect();
    ids.sort();
    Ok(ids)
}

/// Frees machine `id` and says so in an event on `obj` (`what`: "Machine" or "Firewall").
pub async fn free<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    id: &str,
    what: &str,
) -> Result<()> {
    match ctx.metal.machine_free(id).await {
        Ok(_) => ctx.fleet.freed(id).await,
        Err(e) if e.is_not_found() => {
            ctx.fleet.freed(id).await;
            return Ok(());
        }
        Err(e) => {
            // metal-api may have freed it anyway: listings from before are not used again.
            ctx.fleet.invalidate_all();
            return Err(e.into());
        }
    }
    let note = format!("freed {} {id}", what.to_lowercase());
    ctx.note(obj, &format!("{what}Freed"), &format!("Free{what}"), note);
    Ok(())
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
            ctx.note(obj, &format!("{what}Allocated"), &action, note);
            Ok(m)
        }
        Err(e) => {
            let reason = format!("{what}AllocationFailed");
            ctx.warn(obj, &reason, &action, e.to_string());
            Err(e.into())
        }
    }
}

/// How far a metal-stack machine is, read from its event log and liveliness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Ready,
    Provisioning(String),
    CrashLoop,
    FailedReclaim,
    NotAlive(String),
}

impl Health {
    /// When to look again while not ready: a provisioning machine soon (it is about to
    /// progress), a failing one with the growing backoff (a person has to act).
    pub fn requeue(&self) -> crate::controllers::step::Requeue {
        use crate::controllers::step::Requeue;
        match self {
            Health::Ready => Requeue::Resync,
            Health::Provisioning(_) => Requeue::Booting,
            Health::CrashLoop | Health::FailedReclaim | Health::NotAlive(_) => Requeue::Poll,
        }
    }

    pub fn of(m: &Machine) -> Health {
        if m.events.crash_loop {
            return Health::CrashLoop;
        }
        if m.events.failed_machine_reclaim {
            return Health::FailedReclaim;
        }
        match m.last_event() {
            Some(event::PHONED_HOME) if m.liveliness == liveliness::ALIVE => Health::Ready,
            Some(event::PHONED_HOME) => Health::NotAlive(m.liveliness.clone()),
            other => Health::Provisioning(other.unwrap_or("none").to_owned()),
        }
    }

    /// (healthy, reason, message) of the health condition.
    pub fn condition(&self) -> (bool, Reason, String) {
        match self {
            Health::Ready => (true, Reason::PhonedHome, "the machine has phoned home and is alive".into()),
            Health::Provisioning(event) => (true, Reason::Provisioning, format!("provisioning; last event: {event}")),
            Health::CrashLoop => (false, Reason::CrashLoop, "the machine is in a crash loop (it PXE-boots again instead of phoning home); check its console in metal-stack".into()),
            Health::FailedReclaim => (false, Reason::FailedReclaim, "the machine phoned home after it was freed: its reclaim failed; an operator must reinstall it".into()),
            Health::NotAlive(l) => (false, Reason::NotAlive, format!("the machine phoned home but its liveliness is {l}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metal_api::types::MachineEvent;

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

    fn machine(last: &str, liveliness: &str) -> Machine {
        let mut m = Machine {
            liveliness: liveliness.into(),
            ..Default::default()
        };
        m.events.log.push(MachineEvent {
            event: last.into(),
            ..Default::default()
        });
        m
    }

    #[test]
    fn health_follows_events_and_liveliness() {
        assert_eq!(
            Health::of(&machine(event::PHONED_HOME, "Alive")),
            Health::Ready
        );
        assert_eq!(
            Health::of(&machine(event::PHONED_HOME, "Unknown")),
            Health::NotAlive("Unknown".into())
        );
        assert_eq!(
            Health::of(&machine(event::INSTALLING, "Alive")),
            Health::Provisioning("Installing".into())
        );
        let mut looping = machine(event::PHONED_HOME, "Alive");
        looping.events.crash_loop = true;
        assert_eq!(Health::of(&looping), Health::CrashLoop);
        let mut reclaim = machine(event::PHONED_HOME, "Alive");
        reclaim.events.failed_machine_reclaim = true;
        assert_eq!(Health::of(&reclaim), Health::FailedReclaim);
        let (healthy, reason, _) = Health::CrashLoop.condition();
        assert_eq!((healthy, reason), (false, Reason::CrashLoop));
    }
}
