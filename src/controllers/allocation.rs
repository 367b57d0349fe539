//! Machines capms allocates in metal-api, for MetalStackMachines and MetalStackFirewalls alike:
//! which machine an object means, finding the one already allocated for it, its health, and
//! freeing exactly what carries the object's owner tags.

use super::conditions::Reason;
use super::context::*;
use crate::api::common::ProviderId;
use crate::metal::types::{Machine, MachineFindRequest, event, liveliness};
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
        let parsed = ProviderId::parse_spec(text)?;
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
    Ours(Box<Machine>),
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

/// Observes the machine allocated for the object with `marks`: the recorded one, the preset
/// one, or the one its owner tags find with `role` (machine or firewall).
pub async fn lookup(
    ctx: &Context,
    marks: &BTreeMap<String, String>,
    target: &Target,
    role: &str,
) -> Result<Found> {
    let lost = match &target.recorded {
        Some(id) => match still_ours(ctx, id, marks).await? {
            Ok(m) => return Ok(Found::Ours(Box::new(m))),
            Err(lost) => Some(lost),
        },
        None => None,
    };
    if let Some(id) = &target.preset {
        let m = match ctx.metal.machine(id).await {
            Ok(m) => m,
            Err(e) if e.is_not_found() => return Ok(Found::PresetMissing(id.clone())),
            Err(e) => return Err(e.into()),
        };
        return Ok(match &m.allocation {
            Some(_) if has_owner_tags(&m.tags, marks) => Found::Ours(Box::new(m)),
            Some(a) => Found::PresetTaken {
                id: m.id.clone(),
                name: a.name.clone(),
                project: a.project.clone(),
            },
            None => Found::Nothing,
        });
    }
    let find = MachineFindRequest {
        tags: owner_tags(marks),
        allocation_role: Some(role.into()),
        ..Default::default()
    };
    let found = ctx.metal.machine_find(&find).await?;
    let ours = found.into_iter().find(|m| m.allocation.is_some());
    Ok(match (ours, lost) {
        (Some(m), _) => Found::Ours(Box::new(m)),
        (None, Some(lost)) => Found::Lost(lost),
        (None, None) => Found::Nothing,
    })
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

/// Observes, for deletion, the ids of every allocated machine that carries `marks` (found by
/// tag, plus the `recorded` one), and only those: capms never frees a machine it did not
/// allocate for this object.
pub async fn owned(
    ctx: &Context,
    marks: &BTreeMap<String, String>,
    recorded: Option<&str>,
) -> Result<Vec<String>> {
    let find = MachineFindRequest {
        tags: owner_tags(marks),
        ..Default::default()
    };
    let found = ctx.metal.machine_find(&find).await?;
    let mut ids: Vec<String> = found
        .iter()
        .filter(|m| m.allocation.is_some() && has_owner_tags(&m.tags, marks))
        .map(|m| m.id.clone())
        .collect();
    if let Some(id) = recorded.filter(|id| !ids.iter().any(|x| x == id))
        && still_ours(ctx, id, marks).await?.is_ok()
    {
        ids.push(id.to_owned());
    }
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
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let note = format!("freed {} {id}", what.to_lowercase());
    ctx.note(obj, &format!("{what}Freed"), &format!("Free{what}"), note)
        .await;
    Ok(())
}

/// Publishes the outcome of an allocation on `obj` and passes it on.
pub async fn announce<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    what: &str,
    result: Result<Machine, crate::metal::Error>,
    detail: &str,
) -> Result<Machine> {
    let action = format!("Allocate{what}");
    match result {
        Ok(m) => {
            let note = format!("allocated {} {}{detail}", what.to_lowercase(), m.id);
            ctx.note(obj, &format!("{what}Allocated"), &action, note)
                .await;
            Ok(m)
        }
        Err(e) => {
            let reason = format!("{what}AllocationFailed");
            ctx.warn(obj, &reason, &action, e.to_string()).await;
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
    use crate::metal::types::MachineEvent;

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
