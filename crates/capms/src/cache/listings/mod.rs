//! The machines of each cluster as metal-api last listed them: one `POST /v1/machine/find` by
//! the cluster's tag answers every MetalStackMachine and the firewall of that cluster, instead of
//! a `GET /v1/machine/{id}` per object and poll.
//!
//! A listing is used only while it is younger than the caller allows, and it always holds
//! capms's own writes: a machine capms allocated is put into the cluster's listing as metal-api
//! returned it (after any find in flight, which holds the listing), a machine capms freed leaves
//! every listing, and an allocation or free whose outcome is unknown (an error) makes the
//! listings from before unusable. So a reconcile never misses the machine it has just allocated
//! (which would allocate a second one) nor frees one twice, and a cluster's machines coming up
//! or going one after another do not each cost a new find.
//!
//! Every new listing is compared with the one before: an object whose machine changed stage
//! (allocated or not, provisioning, phoned home, failing) or went away is woken at once, so a
//! booting machine reports ready as soon as any reconcile of its cluster lists it, not at its
//! own next poll.

use super::skipped_fields::{FIRST, Paths, decode_skipping};
use crate::ownership::{OwnerKind, has_owner_tags, owner_of};
use futures::channel::mpsc;
use metal_api::types::{Machine, MachineFindRequest, MachineHealth};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a cluster's listing is kept after its last use.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// How long capms remembers a machine it freed: the object it was freed for is reconciled
/// again within seconds to drop its finalizer, even on a busy management cluster.
const FREED_KNOWN_FOR: Duration = Duration::from_secs(120);

/// How old a listing a booting machine accepts. Each new listing wakes the objects whose machine
/// changed stage, so while a cluster's machines boot, their polls list the cluster about once
/// per this interval and a machine that phoned home is seen within about as long.
pub(crate) const BOOTING_MAX_AGE: Duration = Duration::from_secs(1);

/// The youngest listing a cluster on metal-apiserver (API v2) asks for once its token has spent
/// most of its calls for the minute (100 by default): a cluster whose machines boot then lists
/// about 12 times a minute rather than 60, and its allocations keep the rest.
pub(crate) const V2_MIN_AGE: Duration = Duration::from_secs(5);

/// The share of a token's calls per minute below which its clusters list at most every
/// [`V2_MIN_AGE`]. Above it they list as often as on v1: a cluster of 40 workers spends about 45
/// calls allocating, and a quarter of the budget is about 22 listings, 22 s of booting.
const V2_PLENTY_LEFT: f64 = 0.25;

/// The youngest listing a cluster on v2 asks for, with `left` of its token's budget (0 to 1).
fn v2_min_age(left: f64) -> Duration {
    if left > V2_PLENTY_LEFT {
        Duration::ZERO
    } else {
        V2_MIN_AGE
    }
}

/// How old a listing a deleted object accepts to find what it must free. A listing holds
/// capms's own frees, so a cluster's objects going together share one.
pub(crate) const TEARDOWN_MAX_AGE: Duration = Duration::from_secs(2);

/// Which cluster's listing a reconcile reads (by the cluster's tag), and how old it may be
/// (short while a machine boots, half the sync period once it is ready).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub cluster_tag: String,
    pub max_age: Duration,
}

impl Query {
    /// For an object of the cluster with id `cluster_id` (`<namespace>.<name>`), at most
    /// `max_age` old.
    pub(crate) fn of_cluster(cluster_id: &str, max_age: Duration) -> Query {
        Query {
            cluster_tag: format!("{}={cluster_id}", metal_api::tags::CLUSTER_ID),
            max_age,
        }
    }
}

/// Every cluster's listing.
#[derive(Default)]
pub struct Listings {
    clusters: Mutex<HashMap<String, Arc<Slot>>>,
    /// Bumped by every change of unknown outcome or cluster: listings from before are stale.
    unknown: AtomicU64,
    /// The controllers following changed machines, each for the objects of one kind.
    followers: Mutex<Vec<(OwnerKind, mpsc::UnboundedSender<Owner>)>>,
    /// The machines capms freed in the last [`FREED_KNOWN_FOR`]: when, and for whom.
    freed: Mutex<HashMap<String, Freed>>,
}

/// A machine capms freed: when, and the owner marks of the object it was freed for.
struct Freed {
    at: Instant,
    owner: BTreeMap<String, String>,
}

/// An object of capms's, by namespace and name.
pub(crate) type Owner = (String, String);

#[derive(Default)]
struct Slot {
    /// Bumped by every allocation in this cluster.
    allocations: AtomicU64,
    listing: tokio::sync::Mutex<Option<Snapshot>>,
    used: Mutex<Option<Instant>>,
}

/// One answer of metal-api's find, as changed by capms's own writes since.
struct Snapshot {
    requested: Instant,
    /// (allocations, unknown changes) when it was requested.
    epoch: (u64, u64),
    /// Shared with the reconciles reading it; a change copies the list, never the machines.
    machines: Arc<Vec<Arc<Machine>>>,
}

/// A cluster's machines as listed: each shared, not copied, by every reader.
pub type ListedMachines = Arc<Vec<Arc<Machine>>>;

impl Listings {
    fn slot(&self, cluster_tag: &str) -> Arc<Slot> {
        let mut clusters = self.clusters.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        clusters.retain(|_, s| {
            let used = s.used.lock().unwrap_or_else(|p| p.into_inner());
            used.is_none_or(|t| now.duration_since(t) < FORGET_AFTER)
        });
        let slot = clusters.entry(cluster_tag.to_owned()).or_default().clone();
        *slot.used.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        slot
    }

    fn epoch(&self, slot: &Slot) -> (u64, u64) {
        (
            slot.allocations.load(Ordering::SeqCst),
            self.unknown.load(Ordering::SeqCst),
        )
    }

    /// Every machine carrying the query's cluster tag, at most its `max_age` old. Concurrent
    /// callers for one cluster share one request.
    pub async fn machines(
        &self,
        metal: &metal_api::Client,
        query: &Query,
    ) -> Result<ListedMachines, metal_api::Error> {
        let (cluster_tag, mut max_age) = (query.cluster_tag.as_str(), query.max_age);
        if let Some(left) = metal.budget_left() {
            max_age = max_age.max(v2_min_age(left));
        }
        let slot = self.slot(cluster_tag);
        let mut listing = slot.listing.lock().await;
        if let Some(l) = listing.as_ref()
            && l.epoch == self.epoch(&slot)
            && l.requested.elapsed() <= max_age
        {
            return Ok(l.machines.clone());
        }
        let (requested, epoch) = (Instant::now(), self.epoch(&slot));
        let find = MachineFindRequest {
            tags: vec![cluster_tag.to_owned()],
            ..Default::default()
        };
        let found = metal.machine_find_as::<Listed>(&find).await?;
        let machines: ListedMachines =
            Arc::new(found.into_iter().map(|Listed(m)| kept(m)).collect());
        if let Some(before) = listing.as_ref() {
            self.wake(changed(&before.machines, &machines));
        }
        *listing = Some(Snapshot {
            requested,
            epoch,
            machines: machines.clone(),
        });
        Ok(machines)
    }

    /// capms allocated `machine` in the cluster with `cluster_tag`: the listing holds it from now
    /// on (a find in flight holds the listing until its answer is in, so that answer cannot
    /// drop it again).
    pub async fn record(&self, cluster_tag: &str, machine: &Machine) {
        self.freed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&machine.id);
        let slot = self.slot(cluster_tag);
        let mut listing = slot.listing.lock().await;
        if let Some(l) = listing.as_mut() {
            let machines = Arc::make_mut(&mut l.machines);
            machines.retain(|m| m.id != machine.id);
            machines.push(kept(machine.clone()));
        }
    }

    /// An allocation carrying `cluster_tag` may have happened without capms knowing the
    /// machine (it failed, or its answer was lost): listings requested before are not used
    /// again.
    pub(crate) fn invalidate(&self, cluster_tag: &str) {
        self.slot(cluster_tag)
            .allocations
            .fetch_add(1, Ordering::SeqCst);
    }

    /// capms freed machine `id` for the object with `owner` marks (or metal-api no longer has
    /// it): it leaves every listing that still shows it allocated for that object (a find in
    /// flight holds its listing until its answer is in, which may still show it).
    ///
    /// Only that allocation leaves. The removal waits for each cluster's listing in turn, and a
    /// listing is held while its find is in flight: on a busy management cluster the removal
    /// reached a cluster's listing seconds after metal-api had freed the machine, by which time
    /// it had been reclaimed and allocated again, for another object. Removing it by id alone
    /// dropped that newer allocation from its cluster's listing, and the object it was allocated
    /// for, deleted next, was let go with the machine still allocated (a 10 × 100 run leaked one
    /// machine so).
    pub async fn freed(&self, id: &str, owner: &BTreeMap<String, String>) {
        {
            let mut freed = self.freed.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            freed.retain(|_, f| now.duration_since(f.at) < FREED_KNOWN_FOR);
            let owner = owner.clone();
            freed.insert(id.to_owned(), Freed { at: now, owner });
        }
        let slots: Vec<Arc<Slot>> = {
            let clusters = self.clusters.lock().unwrap_or_else(|p| p.into_inner());
            clusters.values().cloned().collect()
        };
        let this = |m: &Arc<Machine>| m.id == id && has_owner_tags(&m.tags, owner);
        for slot in slots {
            let mut listing = slot.listing.lock().await;
            if let Some(l) = listing.as_mut()
                && l.machines.iter().any(this)
            {
                Arc::make_mut(&mut l.machines).retain(|m| !this(m));
            }
        }
    }

    /// Did capms free machine `id` for the object with `owner` marks (or learn metal-api no
    /// longer has it) in the last [`FREED_KNOWN_FOR`], and not allocate it again since? Then
    /// that object, being deleted and naming it, need not ask metal-api whether it is still its
    /// own.
    pub(crate) fn freed_by_capms(&self, id: &str, owner: &BTreeMap<String, String>) -> bool {
        let freed = self.freed.lock().unwrap_or_else(|p| p.into_inner());
        freed
            .get(id)
            .is_some_and(|f| f.at.elapsed() < FREED_KNOWN_FOR && f.owner == *owner)
    }

    /// The objects of `kind` whose machine changed between two listings, as they are found.
    pub fn follow(&self, kind: OwnerKind) -> mpsc::UnboundedReceiver<Owner> {
        let (tx, rx) = mpsc::unbounded();
        let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        followers.push((kind, tx));
        rx
    }

    fn wake(&self, owners: Vec<(OwnerKind, Owner)>) {
        if owners.is_empty() {
            return;
        }
        let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        followers.retain(|(_, tx)| !tx.is_closed());
        for (kind, owner) in owners {
            for (_, tx) in followers.iter().filter(|(k, _)| *k == kind) {
                // A follower that stopped is dropped at the next wake.
                let _ = tx.unbounded_send(owner.clone());
            }
        }
    }

    /// A machine of any cluster may have changed under capms's hands (a free that failed, an
    /// allocation without a cluster tag): no listing from before is used again.
    pub(crate) fn invalidate_all(&self) {
        self.unknown.fetch_add(1, Ordering::SeqCst);
    }
}

/// What a listing skips while decoding a listed machine (see [`kept`]).
const NOT_LISTED: Paths = &[
    &["hardware"],
    &["bios"],
    &["partition"],
    &["size"],
    &["events", "log", FIRST],
    &["allocation", "image"],
    &["allocation", "user_data"],
    &["allocation", "ssh_pub_keys"],
    &["allocation", "firewall_rules"],
];
const _: () = assert!(
    NOT_LISTED.len() <= 64,
    "decode_skipping follows at most 64 paths"
);

/// A machine of metal-api's answer decoded without what a listing drops anyway: a cluster's
/// machines are listed about once a second while they boot, and those fields are most of each.
struct Listed(Machine);

impl<'de> serde::Deserialize<'de> for Listed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        decode_skipping(deserializer, NOT_LISTED).map(Listed)
    }
}

/// A listed machine as a listing keeps it (also one capms allocated, from metal-api's answer),
/// without what no reconcile reads: its hardware and BIOS, the partition, size and image it
/// names in full, every event but the newest (metal-api lists the newest first), and its
/// allocation's user data, SSH keys and firewall rules. On real machines these are most of the
/// answer (every NIC with its neighbours, every disk, up to a hundred events, the bootstrap
/// data of a kubeadm node), and a listing is kept for every cluster.
fn kept(mut m: Machine) -> Arc<Machine> {
    m.hardware = Default::default();
    m.bios = Default::default();
    m.partition = None;
    m.size = None;
    m.events.log.truncate(1);
    m.events.log.shrink_to_fit();
    if let Some(a) = m.allocation.as_mut() {
        a.image = None;
        a.user_data = String::new();
        a.ssh_pub_keys = Vec::new();
        a.firewall_rules = None;
    }
    Arc::new(m)
}

/// What a reconcile reads of a machine to tell its object's stage: allocated or not, and its
/// health (provisioning, phoned home, failing). A new lifecycle event while it provisions is no
/// new stage: the object's own booting poll reports it.
fn stage(m: &Machine) -> (bool, std::mem::Discriminant<MachineHealth>) {
    (m.allocation.is_some(), std::mem::discriminant(&m.health()))
}

/// The owners of the machines whose stage differs between `before` and `after`, or that are in
/// only one of them.
fn changed(before: &[Arc<Machine>], after: &[Arc<Machine>]) -> Vec<(OwnerKind, Owner)> {
    let earlier: HashMap<&str, &Machine> = before.iter().map(|m| (m.id.as_str(), &**m)).collect();
    let now: HashMap<&str, &Machine> = after.iter().map(|m| (m.id.as_str(), &**m)).collect();
    let moved = after.iter().filter(|m| {
        earlier
            .get(m.id.as_str())
            .is_none_or(|e| stage(e) != stage(m))
    });
    let gone = before.iter().filter(|m| !now.contains_key(m.id.as_str()));
    moved
        .chain(gone)
        .filter_map(|m| owner_of(&m.tags))
        .map(|(kind, namespace, name)| (kind, (namespace, name)))
        .collect()
}

#[cfg(test)]
mod tests;
