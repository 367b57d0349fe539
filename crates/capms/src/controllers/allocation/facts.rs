//! What an allocation is, without I/O: which machine an object means (its providerID and the
//! machine its status records) and what metal-api was found to hold for it.

use metal_api::ProviderId;
use metal_api::types::Machine;
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

/// A spec.providerID that names no metal-stack machine.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{field} {0}", field = PROVIDER_ID_FIELD)]
pub(crate) struct InvalidProviderId(metal_api::provider_id::Invalid);

impl Target {
    /// From spec.providerID; `partition` tells capms' own `metal://<partition>/<id>` apart from
    /// a user's choice. `recorded` is a machine id capms noted in status, if any.
    pub fn of(
        provider_id: Option<&str>,
        partition: &str,
        recorded: Option<&str>,
    ) -> Result<Target, InvalidProviderId> {
        let Some(text) = provider_id else {
            return Ok(Target {
                recorded: recorded.map(str::to_owned),
                preset: None,
            });
        };
        let parsed = ProviderId::parse(text).map_err(InvalidProviderId)?;
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

/// The machine an object names: the one recorded in its status, else the one its providerID
/// names.
pub(crate) fn named_machine(provider_id: Option<&str>, recorded: Option<&str>) -> Option<String> {
    let named = || ProviderId::parse(provider_id?).ok().map(|p| p.machine_id);
    recorded.map(str::to_owned).or_else(named)
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
        assert!(bad.to_string().starts_with("spec.providerID"), "{bad}");
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
}
