//! Which allocations the sweep frees, decided without I/O from what it observed and how long
//! each has been seen orphaned.

use crate::ownership::OwnerKind;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Freeing what capms allocated in metal-api: a step, named as every controller's steps are
/// (they name the crash points and the log).
#[allow(clippy::enum_variant_names)]
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, strum::IntoStaticStr, strum::VariantNames,
)]
pub enum SweepStep {
    FreeMachine(String),
    FreeIp(String),
    FreeNetwork(String),
}

/// The object an allocation's owner marks name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Owner {
    pub kind: OwnerKind,
    pub namespace: String,
    pub name: String,
}

/// An allocation of a cluster capms manages, carrying capms's owner marks (with the owner's
/// uid, which only capms writes).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Candidate {
    /// Freeing it.
    pub step: SweepStep,
    pub owner: Owner,
    /// The Cluster (Cluster API's) it belongs to, `namespace/name`: where the event goes.
    pub cluster: String,
}

/// What the sweep saw: the allocations of the clusters it manages, and which of their owners
/// the watch caches hold.
#[derive(Debug, Default)]
pub struct SweepView {
    pub candidates: Vec<Candidate>,
    pub present: BTreeSet<Owner>,
}

/// The allocations seen orphaned, and since when (in this process: a restart starts over).
#[derive(Debug, Default)]
pub(crate) struct Orphans {
    since: BTreeMap<SweepStep, Instant>,
}

impl Orphans {
    /// The allocations to free now: those whose owner has been gone for `grace` at `now`, by
    /// every look since. One seen with its owner again, or not seen, starts over.
    pub(crate) fn decide(
        &mut self,
        observed: &SweepView,
        now: Instant,
        grace: Duration,
    ) -> Vec<Candidate> {
        let orphaned: Vec<&Candidate> = observed
            .candidates
            .iter()
            .filter(|c| !observed.present.contains(&c.owner))
            .collect();
        self.since
            .retain(|step, _| orphaned.iter().any(|c| c.step == *step));
        let mut due: Vec<Candidate> = orphaned
            .into_iter()
            .filter(|c| {
                let since = *self.since.entry(c.step.clone()).or_insert(now);
                now.saturating_duration_since(since) >= grace
            })
            .cloned()
            .collect();
        // Machines first: a network is freed once nothing is left in it.
        due.sort_by_key(|c| match c.step {
            SweepStep::FreeMachine(_) => 0,
            SweepStep::FreeIp(_) => 1,
            SweepStep::FreeNetwork(_) => 2,
        });
        due
    }

    /// Forgets `step` (it was freed).
    pub fn freed(&mut self, step: &SweepStep) {
        self.since.remove(step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(kind: OwnerKind, name: &str) -> Owner {
        Owner {
            kind,
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn machine(id: &str, of: &str) -> Candidate {
        Candidate {
            step: SweepStep::FreeMachine(id.into()),
            owner: owner(OwnerKind::Machine, of),
            cluster: "ns/c".into(),
        }
    }

    const GRACE: Duration = Duration::from_secs(600);

    #[test]
    fn an_allocation_is_freed_once_its_owner_has_been_gone_for_the_grace_period() {
        let mut orphans = Orphans::default();
        let start = Instant::now();
        let observed = SweepView {
            candidates: vec![machine("m1", "gone"), machine("m2", "here")],
            present: [owner(OwnerKind::Machine, "here")].into(),
        };
        assert_eq!(orphans.decide(&observed, start, GRACE), []);
        let almost = start + GRACE - Duration::from_secs(1);
        assert_eq!(orphans.decide(&observed, almost, GRACE), []);
        let due = orphans.decide(&observed, start + GRACE, GRACE);
        assert_eq!(
            due,
            [machine("m1", "gone")],
            "never the one whose owner is there"
        );
        orphans.freed(&due[0].step);
        assert_eq!(
            orphans.decide(&observed, start + GRACE, GRACE),
            [],
            "starts over"
        );
    }

    #[test]
    fn an_owner_seen_again_or_an_allocation_gone_starts_the_wait_over() {
        let mut orphans = Orphans::default();
        let start = Instant::now();
        let gone = SweepView {
            candidates: vec![machine("m1", "restored")],
            present: BTreeSet::new(),
        };
        orphans.decide(&gone, start, GRACE);
        // A restore brings the owner back for a while.
        let back = SweepView {
            candidates: gone.candidates.clone(),
            present: [owner(OwnerKind::Machine, "restored")].into(),
        };
        orphans.decide(&back, start + GRACE / 2, GRACE);
        assert_eq!(
            orphans.decide(&gone, start + GRACE, GRACE),
            [],
            "waits anew"
        );
        let freed_elsewhere = SweepView::default();
        orphans.decide(&freed_elsewhere, start + GRACE, GRACE);
        assert_eq!(
            orphans.decide(&gone, start + 2 * GRACE, GRACE),
            [],
            "waits anew"
        );
        let due = orphans.decide(&gone, start + 3 * GRACE, GRACE);
        assert_eq!(due.len(), 1);
    }

    #[test]
    fn machines_go_before_ips_before_networks() {
        let mut orphans = Orphans::default();
        let start = Instant::now();
        let cluster = |step| Candidate {
            step,
            owner: owner(OwnerKind::Cluster, "c"),
            cluster: "ns/c".into(),
        };
        let observed = SweepView {
            candidates: vec![
                cluster(SweepStep::FreeNetwork("n".into())),
                cluster(SweepStep::FreeIp("127.100.0.5".into())),
                machine("m", "gone"),
            ],
            present: BTreeSet::new(),
        };
        let due = orphans.decide(&observed, start, Duration::ZERO);
        let order: Vec<&'static str> = due.iter().map(|c| (&c.step).into()).collect();
        assert_eq!(order, ["FreeMachine", "FreeIp", "FreeNetwork"]);
    }
}
