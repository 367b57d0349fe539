//! What a MetalStackMachine reconcile observes and the steps it can take, and the facts about
//! the object and its cluster that observe, decide and the watches share.

use crate::api::{MetalStackCluster, MetalStackMachine, MetalStackMachineStatus};
use crate::capi::{CLUSTER_NAME_LABEL, Machine as CapiMachine};
use crate::controllers::allocation::AllocationStep;
use crate::controllers::allocation::Found;
use crate::reconciler::Decision;
use crate::reconciler::clock::elapsed;
use crate::reconciler::handoffs::Handoff;
use kube::ResourceExt;
use metal_api::catalog::MachineSummary;
use metal_api::types::MachineAllocateRequest;
use std::time::Duration;

/// What observe read. Deleting carries the ids of the machines still allocated for it.
pub type Observed = crate::reconciler::Observed<Live, Vec<String>>;

/// What observe read of a live MetalStackMachine.
#[derive(Debug)]
pub struct Live {
    /// When observe read: how long a wait has lasted is measured against it.
    pub now: jiff::Timestamp,
    /// The first gate that is closed, or what allocating needs once every gate is open.
    pub gate: MachineGate,
}

/// The gates a live MetalStackMachine passes before capms allocates for it. `observe` walks
/// them in this order, reads nothing past the first closed one, and is the one place the order
/// is stated: `decide` reports a closed gate and never checks one again.
#[derive(Debug)]
pub enum MachineGate {
    /// No owner reference to a Machine: Cluster API's contract has capms write nothing yet.
    NoOwner,
    /// The owning Machine is not there (yet).
    NoMachine,
    /// The Machine's Cluster is not there (yet).
    NoCluster { machine: CapiMachine },
    /// Reconciliation is paused, by the Cluster or by the object's own annotation: why.
    Paused(String),
    /// A new replica (no finalizer yet) waits, unwritten, while its MachineSet is still
    /// creating replicas, and a later gate is closed too: for at most `left` before it looks
    /// again. Once every other gate is open, a held replica is allocated all the same (see
    /// [`MachineInputs::held`]).
    HeldByMachineSet { left: Duration },
    /// The Cluster's MetalStackCluster is not there or not provisioned.
    NoInfrastructure { machine: CapiMachine },
    /// The Machine names no bootstrap data Secret yet.
    NoBootstrapSecret { machine: CapiMachine },
    /// Every gate is open.
    Open(Box<MachineInputs>),
}

/// A MachineSet that is still creating replicas.
#[derive(Debug)]
pub struct MachineSetPace {
    /// When it last created a replica (its newest Machine's creation).
    pub newest: Option<jiff::Timestamp>,
    /// How long a MachineSet may go without creating a replica before its waiting replicas
    /// start anyway, and a tenth of the longest wait (the manager's `--machine-set-wait`).
    pub wait: Duration,
}

/// How often a replica waiting for its MachineSet looks again. The MachineSet's report wakes
/// its replicas; this look only catches one whose Machine capms's cache did not hold yet when
/// the report came. Each look is a reconcile: every 5 s, 1,000 waiting replicas made 20,000 of
/// them while Cluster API created the rest.
const HOLD_POLL: Duration = Duration::from_secs(30);
/// A new replica waits for its MachineSet at most this many times `--machine-set-wait`, even
/// while the MachineSet keeps creating replicas.
const HOLD_LIMIT: u32 = 10;

impl MachineSetPace {
    /// How much longer new replica `msm` leaves its Machine to Cluster API at `now`, if it does.
    /// While its MachineSet is still creating replicas, each write capms makes wakes Cluster
    /// API's Machine controller, whose requests share one client rate limit with that creation:
    /// on a busy management cluster, starting at once slows the creation of the rest. A real
    /// machine takes minutes to provision, so the replica waits, unwritten, until the MachineSet
    /// reports all its replicas (which wakes it). A MachineSet that has created none for `wait`
    /// is stuck, not busy: its replicas go on then, and none waits longer than [`HOLD_LIMIT`]
    /// times that from its creation. It looks again every [`HOLD_POLL`] meanwhile. A replica
    /// without a known creation time (none, or one far in the future) does not wait.
    pub(crate) fn hold(&self, msm: &MetalStackMachine, now: jiff::Timestamp) -> Option<Duration> {
        let wait = self.wait;
        let created = msm.metadata.creation_timestamp.as_ref()?.0;
        let newest = self.newest.map_or(created, |n| n.max(created));
        let idle = elapsed(newest, now, wait)?;
        let age = elapsed(created, now, wait)?;
        let left = wait
            .checked_sub(idle)?
            .min(wait.saturating_mul(HOLD_LIMIT).checked_sub(age)?);
        (!left.is_zero()).then(|| left.min(HOLD_POLL))
    }
}

/// What allocating needs, read once every gate is open.
#[derive(Debug)]
pub struct MachineInputs {
    pub machine: CapiMachine,
    /// The Cluster's provisioned MetalStackCluster.
    pub msc: MetalStackCluster,
    /// Its private network.
    pub network: String,
    /// What metal-api holds for the object.
    pub found: Found,
    /// The bootstrap Secret's `value`, read only when nothing is allocated yet.
    pub user_data: Option<String>,
    /// Where a machine in the Machine's failure domain (a rack) may come from, read only when
    /// nothing is allocated yet and the Machine names one.
    pub rack_candidates: Option<RackCandidates>,
    /// A new replica still waiting for its MachineSet, for at most this long: its machine is
    /// allocated (metal-api only, so it installs meanwhile) but the object stays unwritten until
    /// the wait ends.
    pub held: Option<Duration>,
    /// Whether a machine that has phoned home may be reported provisioned now, or waits for
    /// Cluster API to take up those handed over before it (see [`crate::reconciler::handoffs`]).
    pub handoff: Handoff,
}

/// The steps a MetalStackMachine reconcile can take.
pub type MachineStep = AllocationStep<MachineAllocateRequest>;

pub(crate) type MachineDecision = Decision<MachineStep, MetalStackMachineStatus>;

/// The owner marks that find what capms allocated for a MetalStackMachine.
pub fn identity(msm: &MetalStackMachine) -> std::collections::BTreeMap<String, String> {
    crate::ownership::identity_of(crate::ownership::OwnerKind::Machine, msm)
}

/// The partition a machine is allocated in: its own, else its cluster's.
pub fn partition(msm: &MetalStackMachine, msc: &MetalStackCluster) -> String {
    msm.spec
        .partition
        .clone()
        .unwrap_or_else(|| msc.spec.partition.clone())
}

/// The private network of a provisioned MetalStackCluster.
pub(crate) fn provisioned_network(msc: &MetalStackCluster) -> Option<&str> {
    msc.status
        .as_ref()
        .filter(|s| s.initialization.as_ref().and_then(|i| i.provisioned) == Some(true))
        .and_then(|s| s.network_id.as_deref())
}

/// The name of the Cluster the machine belongs to.
pub fn cluster_name(msm: &MetalStackMachine, machine: &CapiMachine) -> String {
    msm.labels()
        .get(CLUSTER_NAME_LABEL)
        .cloned()
        .unwrap_or_else(|| machine.spec.cluster_name.clone())
}

/// What a machine placed in a rack is chosen from.
#[derive(Debug)]
pub enum RackCandidates {
    /// The partition's machines of the object's size, as metal-api has them now.
    Machines(Vec<MachineSummary>),
    /// Nothing: the cluster's credentials are a metal-apiserver project token (API v2), which
    /// sees no free machines and cannot name the one to allocate (pinning one is for admins).
    ProjectToken,
}
