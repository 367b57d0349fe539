//! Racks as Cluster API's failure domains, without I/O: which racks a cluster reports, and which
//! machine of a rack a MetalStackMachine whose Machine names one gets.
//!
//! This is the one place capms decides how a failure domain is honoured. metal-api v1 lets
//! capms allocate a named machine, so capms picks a free machine of the rack itself. metal-stack's
//! API v2 cannot pin a rack with a project token: a v2 client would report no failure domains
//! here, and name the reason in the condition a Machine naming one gets.

use metal_api::catalog::MachineSummary;
use std::collections::{BTreeMap, BTreeSet};

/// The machines of one partition that capms may place in racks, as the catalog lists them.
pub(crate) struct RackMachines<'a> {
    pub machines: &'a [MachineSummary],
    pub partition: &'a str,
}

/// Where a Machine naming failure domain `rack` goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RackChoice {
    /// This free machine of the rack.
    Machine(String),
    /// The cluster does not report the rack: these are the ones it does.
    NotReported { valid: Vec<String> },
    /// No machine of the size is free in the rack now: these racks have one.
    NoneFree { elsewhere: Vec<String> },
}

impl RackMachines<'_> {
    fn in_partition(&self) -> impl Iterator<Item = &MachineSummary> {
        let partition = self.partition;
        self.machines
            .iter()
            .filter(move |m| m.partition.as_ref().is_some_and(|p| p.id == partition))
            .filter(|m| !m.rackid.is_empty())
    }

    /// The racks a cluster reports as failure domains, sorted: those holding a free machine of
    /// one of `sizes`, or a machine tagged `cluster_tag` (the cluster's own: a rack does not
    /// drop out under the machines Cluster API placed there).
    pub(crate) fn failure_domains(
        &self,
        sizes: &BTreeSet<String>,
        cluster_tag: &str,
    ) -> Vec<String> {
        let of_size = |m: &MachineSummary| m.size.as_ref().is_some_and(|s| sizes.contains(&s.id));
        let ours = |m: &MachineSummary| m.tags.iter().any(|t| t == cluster_tag);
        let racks: BTreeSet<&str> = self
            .in_partition()
            .filter(|m| (m.is_free() && of_size(m)) || ours(m))
            .map(|m| m.rackid.as_str())
            .collect();
        racks.into_iter().map(str::to_owned).collect()
    }

    /// The free machines of `size`, by rack.
    fn free_by_rack(&self, size: &str) -> BTreeMap<&str, Vec<&str>> {
        let mut by_rack: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let free = self.in_partition().filter(|m| m.is_free());
        for m in free.filter(|m| m.size.as_ref().is_some_and(|s| s.id == size)) {
            by_rack
                .entry(m.rackid.as_str())
                .or_default()
                .push(m.id.as_str());
        }
        by_rack
    }

    /// The machine of `size` in `rack` for the object `spread` identifies (its uid): one of the
    /// rack's free machines, a different one for each object, so that objects placed in one rack
    /// at once do not all ask for the same machine. `reported` are the cluster's failure
    /// domains.
    pub(crate) fn choose(
        &self,
        rack: &str,
        size: &str,
        reported: &[String],
        spread: &str,
    ) -> RackChoice {
        if !reported.iter().any(|r| r == rack) {
            return RackChoice::NotReported {
                valid: reported.to_vec(),
            };
        }
        let by_rack = self.free_by_rack(size);
        let Some(free) = by_rack.get(rack).filter(|f| !f.is_empty()) else {
            let elsewhere = by_rack.keys().map(|r| (*r).to_owned()).collect();
            return RackChoice::NoneFree { elsewhere };
        };
        let mut free = free.clone();
        free.sort_unstable();
        let index = spread
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        RackChoice::Machine(free[index % free.len()].to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metal_api::catalog::{AllocationSummary, IdOnly};

    fn machine(id: &str, rack: &str, size: &str, allocated: Option<&str>) -> MachineSummary {
        MachineSummary {
            id: id.into(),
            partition: Some(IdOnly { id: "fra".into() }),
            rackid: rack.into(),
            size: Some(IdOnly { id: size.into() }),
            allocation: allocated.map(|project| AllocationSummary {
                name: id.into(),
                project: project.into(),
            }),
            liveliness: "Alive".into(),
            ..Default::default()
        }
    }

    fn lab() -> Vec<MachineSummary> {
        let mut ours = machine("a2", "rack-a", "small", Some("p"));
        ours.tags = vec!["cluster.metal-stack.io/id=ns.c".into()];
        let mut dead = machine("d1", "rack-d", "small", None);
        dead.liveliness = "Dead".into();
        let mut locked = machine("d2", "rack-d", "small", None);
        locked.state.value = "LOCKED".into();
        let mut elsewhere = machine("x1", "rack-x", "small", None);
        elsewhere.partition = Some(IdOnly { id: "nbg".into() });
        vec![
            machine("a1", "rack-a", "small", None),
            ours,
            machine("b1", "rack-b", "large", None),
            machine("c1", "rack-c", "small", Some("other")),
            machine("c2", "rack-c", "small", None),
            machine("c3", "rack-c", "small", None),
            dead,
            locked,
            elsewhere,
            machine("e1", "", "small", None),
        ]
    }

    fn sizes(s: &[&str]) -> BTreeSet<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_cluster_reports_the_racks_with_a_free_machine_of_its_sizes_or_a_machine_of_its_own() {
        let machines = lab();
        let racks = RackMachines {
            machines: &machines,
            partition: "fra",
        };
        let tag = "cluster.metal-stack.io/id=ns.c";
        assert_eq!(
            racks.failure_domains(&sizes(&["small"]), tag),
            ["rack-a", "rack-c"]
        );
        assert_eq!(
            racks.failure_domains(&sizes(&["small", "large"]), tag),
            ["rack-a", "rack-b", "rack-c"]
        );
        // A rack emptied by others drops out, unless the cluster has a machine there.
        let taken: Vec<MachineSummary> = machines
            .iter()
            .cloned()
            .map(|mut m| {
                m.allocation.get_or_insert(AllocationSummary::default());
                m
            })
            .collect();
        let racks = RackMachines {
            machines: &taken,
            partition: "fra",
        };
        assert_eq!(racks.failure_domains(&sizes(&["small"]), tag), ["rack-a"]);
        assert!(
            racks
                .failure_domains(&sizes(&["small"]), "other")
                .is_empty()
        );
    }

    #[test]
    fn a_machine_gets_a_free_one_of_its_size_in_its_rack_or_waits_naming_where_there_is_one() {
        let machines = lab();
        let racks = RackMachines {
            machines: &machines,
            partition: "fra",
        };
        let reported: Vec<String> = vec!["rack-a".into(), "rack-b".into(), "rack-c".into()];
        assert_eq!(
            racks.choose("rack-a", "small", &reported, "uid-1"),
            RackChoice::Machine("a1".into())
        );
        // Objects spread over the rack's free machines, each always to the same one.
        let chosen: BTreeSet<RackChoice> = (0..20)
            .map(|n| racks.choose("rack-c", "small", &reported, &format!("uid-{n}")))
            .collect();
        assert_eq!(
            chosen,
            [
                RackChoice::Machine("c2".into()),
                RackChoice::Machine("c3".into())
            ]
            .into()
        );
        assert_eq!(
            racks.choose("rack-c", "small", &reported, "uid-7"),
            racks.choose("rack-c", "small", &reported, "uid-7")
        );
        assert_eq!(
            racks.choose("rack-b", "small", &reported, "uid-1"),
            RackChoice::NoneFree {
                elsewhere: vec!["rack-a".into(), "rack-c".into()]
            }
        );
        assert_eq!(
            racks.choose("rack-d", "small", &reported, "uid-1"),
            RackChoice::NotReported {
                valid: reported.clone()
            }
        );
    }
}
