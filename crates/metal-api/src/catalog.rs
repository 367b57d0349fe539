//! A snapshot of what metal-api knows that a spec can name: partitions, sizes, images (and,
//! through v1, the sizes' image constraints), projects, networks and machines.

use crate::size_images::SizeImageConstraint;
use crate::types::{Image, Machine, MachineFindRequest, Network, Partition, Project, Size};
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Clone)]
pub struct Catalog {
    pub partitions: Vec<Partition>,
    pub sizes: Vec<Size>,
    pub images: Vec<Image>,
    /// Through v1; API v2 is asked about one size and image at a time.
    pub size_image_constraints: Vec<SizeImageConstraint>,
    pub projects: Vec<Project>,
    pub networks: Vec<Network>,
    pub machines: Vec<MachineSummary>,
}

/// The parts of a catalog that every client of one metal-api reads alike, whoever's
/// credentials it holds: partitions, sizes and images (metal-apiserver lists them to any token),
/// and through v1 the sizes' image constraints.
#[derive(Debug, Default, Clone)]
pub struct PublicParts {
    pub partitions: Vec<Partition>,
    pub sizes: Vec<Size>,
    pub images: Vec<Image>,
    pub size_image_constraints: Vec<SizeImageConstraint>,
}

impl PublicParts {
    pub async fn fetch(client: &crate::Client) -> Result<PublicParts, crate::Error> {
        let constraints = async {
            if client.is_v2() {
                return Ok(Vec::new());
            }
            client.size_image_constraints().await
        };
        let (partitions, sizes, images, size_image_constraints) = tokio::try_join!(
            client.partitions(),
            client.sizes(),
            client.images(),
            constraints
        )?;
        Ok(PublicParts {
            partitions,
            sizes,
            images,
            size_image_constraints,
        })
    }
}

/// The parts of a catalog that a project's credentials see of the project: its networks
/// (and, through API v2, the base networks it may use) and its machines. Through API v2 every
/// token of one project reads them alike.
#[derive(Debug, Default, Clone)]
pub struct ProjectParts {
    pub networks: Vec<Network>,
    pub machines: Vec<MachineSummary>,
}

impl ProjectParts {
    pub async fn fetch(client: &crate::Client) -> Result<ProjectParts, crate::Error> {
        let all_machines = MachineFindRequest::default();
        let (networks, machines) = tokio::try_join!(
            client.networks(),
            client.machine_find_as::<MachineSummary>(&all_machines),
        )?;
        Ok(ProjectParts { networks, machines })
    }
}

impl Catalog {
    /// Everything, read at once.
    pub async fn fetch(client: &crate::Client) -> Result<Catalog, crate::Error> {
        let (public, own) =
            tokio::try_join!(PublicParts::fetch(client), Catalog::fetch_own(client))?;
        Ok(own.with_public(&public))
    }

    /// What `client`'s credentials see of their own: projects, networks and machines; the
    /// public parts left empty.
    pub async fn fetch_own(client: &crate::Client) -> Result<Catalog, crate::Error> {
        let (projects, parts) = tokio::try_join!(client.projects(), ProjectParts::fetch(client))?;
        Ok(Catalog::of_projects(projects, parts))
    }

    /// The catalog of `projects` with `parts`' networks and machines; the public parts left
    /// empty.
    pub fn of_projects(projects: Vec<Project>, parts: ProjectParts) -> Catalog {
        Catalog {
            projects,
            networks: parts.networks,
            machines: parts.machines,
            ..Catalog::default()
        }
    }

    /// This catalog with `public`'s partitions, sizes, images and size image constraints.
    pub fn with_public(self, public: &PublicParts) -> Catalog {
        Catalog {
            partitions: public.partitions.clone(),
            sizes: public.sizes.clone(),
            images: public.images.clone(),
            size_image_constraints: public.size_image_constraints.clone(),
            ..self
        }
    }
}

/// A machine as a catalog keeps it: what a spec naming the machine is checked against (which
/// machine, where, of what size, allocated to whom, with which tags). It decodes from
/// metal-api's machine response, whose other fields (hardware, event log, the allocation's
/// user data and image, …) are skipped unread: the catalog holds every machine metal-api has,
/// and on real machines those fields are most of each.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(default)]
pub struct MachineSummary {
    pub id: String,
    pub partition: Option<IdOnly>,
    pub rackid: String,
    pub size: Option<IdOnly>,
    pub allocation: Option<AllocationSummary>,
    pub state: StateSummary,
    pub liveliness: String,
    pub tags: Vec<String>,
}

/// A machine's state as a catalog keeps it: `""` (available), `RESERVED` or `LOCKED`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(default)]
pub struct StateSummary {
    pub value: String,
}

impl MachineSummary {
    /// Can metal-api allocate it now: not allocated, neither reserved nor locked, and alive.
    pub fn is_free(&self) -> bool {
        self.allocation.is_none()
            && self.state.value.is_empty()
            && self.liveliness == crate::types::liveliness::ALIVE
    }
}

/// A partition or size as a machine response names it, by its id only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(default)]
pub struct IdOnly {
    pub id: String,
}

/// Who a machine is allocated to: the allocation's name and project.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(default)]
pub struct AllocationSummary {
    pub name: String,
    pub project: String,
}

impl From<&Machine> for MachineSummary {
    fn from(m: &Machine) -> Self {
        let id_only = |id: &str| IdOnly { id: id.to_owned() };
        MachineSummary {
            id: m.id.clone(),
            partition: m.partition.as_ref().map(|p| id_only(&p.id)),
            rackid: m.rackid.clone(),
            size: m.size.as_ref().map(|s| id_only(&s.id)),
            allocation: m.allocation.as_ref().map(|a| AllocationSummary {
                name: a.name.clone(),
                project: a.project.clone(),
            }),
            state: StateSummary {
                value: m.state.value.clone(),
            },
            liveliness: m.liveliness.clone(),
            tags: m.tags.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{MachineAllocation, MachineNic};

    #[test]
    fn a_summary_decodes_from_a_whole_machine_response_as_it_is_made_from_the_machine() {
        let mut machine = Machine {
            id: "m1".into(),
            partition: Some(Partition {
                id: "p1".into(),
                ..Default::default()
            }),
            size: Some(Size {
                id: "s1".into(),
                ..Default::default()
            }),
            allocation: Some(MachineAllocation {
                name: "worker-0".into(),
                project: "proj".into(),
                user_data: "I2Nsb3VkLWNvbmZpZw==".into(),
                ..Default::default()
            }),
            tags: vec!["cluster.metal-stack.io/id=ns.c".into()],
            rackid: "rack-2".into(),
            liveliness: "Alive".into(),
            ..Default::default()
        };
        machine.hardware.nics = vec![MachineNic::default(); 2];
        let response = serde_json::to_value(&machine).expect("json");
        let decoded: MachineSummary = serde_json::from_value(response).expect("a summary");
        assert_eq!(decoded, MachineSummary::from(&machine));
        assert!(!decoded.is_free(), "allocated");
        machine.allocation = None;
        assert!(
            MachineSummary::from(&machine).is_free(),
            "free, alive, neither reserved nor locked"
        );
        machine.state.value = "LOCKED".into();
        assert!(!MachineSummary::from(&machine).is_free(), "locked");
        machine.state.value = String::new();
        machine.liveliness = "Dead".into();
        assert!(!MachineSummary::from(&machine).is_free(), "dead");
        assert_eq!(decoded.partition.map(|p| p.id).as_deref(), Some("p1"));
        assert_eq!(decoded.size.map(|s| s.id).as_deref(), Some("s1"));
        let a = decoded.allocation.expect("allocated");
        assert_eq!((a.name.as_str(), a.project.as_str()), ("worker-0", "proj"));
        assert_eq!(decoded.rackid, "rack-2");
    }

    #[test]
    fn a_free_machine_without_partition_or_size_decodes_with_none() {
        let decoded: MachineSummary =
            serde_json::from_str(r#"{"id": "m2", "partition": null, "allocation": null}"#)
                .expect("a summary");
        assert_eq!(
            decoded,
            MachineSummary {
                id: "m2".into(),
                ..Default::default()
            }
        );
    }
}
