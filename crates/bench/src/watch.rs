//! When each MetalStackMachine and MetalStackFirewall appeared, got its machine, became ready and
//! went away, and when its Machine named bootstrap data and its MachineSet reported every
//! replica: one watch per kind (no polling: the benchmark must not load the apiserver).

use crate::capi_log::Provisioned;
use capms::api::{MetalStackFirewall, MetalStackMachine};
use capms::capi::{Machine, MachineSet};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Seconds since the run's origin of each milestone of one object.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub created: f64,
    /// When Cluster API named the owning Machine (before that capms must not touch it).
    pub owned: Option<f64>,
    /// When its MachineSet had reported every replica, and so capms's wait for the MachineSet
    /// let it go: not before it was owned (see [`Seen::resolved`]).
    pub released: Option<f64>,
    /// When its Machine named the bootstrap data Secret.
    pub bootstrap: Option<f64>,
    pub allocated: Option<f64>,
    /// When the allocated machine phoned home, as the simulator recorded it.
    pub phoned_home: Option<f64>,
    pub ready: Option<f64>,
    /// When Cluster API logged its Machine provisioned: ready as Cluster API sees it.
    pub taken_up: Option<f64>,
    pub gone: Option<f64>,
    /// The owning Machine's name, once Cluster API named it.
    pub machine: Option<String>,
    /// The metal-api machine's id, from `spec.providerID`.
    pub machine_id: Option<String>,
}

impl Timeline {
    /// When every gate capms waits for was open: owned, released by its MachineSet and
    /// bootstrap data named.
    pub fn gates_open(&self) -> Option<f64> {
        let owned = self.owned?;
        let released = self.released.unwrap_or(owned);
        Some(owned.max(released).max(self.bootstrap?))
    }
}

/// What the benchmark saw of a Cluster API Machine.
#[derive(Clone, Debug, Default)]
pub struct MachineSeen {
    pub machine_set: Option<String>,
    /// When it first named its bootstrap data Secret.
    pub bootstrap: Option<f64>,
    /// When Cluster API first logged it provisioned (see [`crate::capi_log`]).
    pub taken_up: Option<f64>,
}

/// What the benchmark saw of a MachineSet.
#[derive(Clone, Debug, Default)]
pub struct MachineSetSeen {
    /// The replicas it wants (its latest spec).
    pub wanted: usize,
    /// When it first reported every replica it wanted (some).
    pub reported: Option<f64>,
}

/// What the benchmark tracks of an object.
trait Tracked: kube::Resource {
    fn owned(&self) -> bool {
        self.meta()
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Machine" || o.kind == "MetalStackCluster")
    }
    fn machine(&self) -> Option<String> {
        let owners = self.meta().owner_references.iter().flatten();
        owners
            .filter(|o| o.kind == "Machine")
            .map(|o| o.name.clone())
            .next()
    }
    fn allocated(&self) -> bool;
    fn ready(&self) -> bool;
    fn provider_id(&self) -> Option<&str>;
}

impl Tracked for MetalStackMachine {
    fn allocated(&self) -> bool {
        self.spec.provider_id.is_some()
    }
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }
    fn ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.ready)
    }
}

impl Tracked for MetalStackFirewall {
    fn allocated(&self) -> bool {
        self.spec.provider_id.is_some()
    }
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }
    fn ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.ready)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub machines: BTreeMap<String, Timeline>,
    pub firewalls: BTreeMap<String, Timeline>,
    /// Cluster API's Machines, by name.
    pub capi_machines: BTreeMap<String, MachineSeen>,
    /// Cluster API's MachineSets, by name.
    pub machine_sets: BTreeMap<String, MachineSetSeen>,
}

impl Seen {
    /// The MetalStackMachines' timelines with what their Machines and MachineSets tell filled
    /// in (`bootstrap`, `released`), and `phoned_home` from `phoned_home(machine id)`.
    pub fn resolved(&self, phoned_home: impl Fn(&str) -> Option<f64>) -> Seen {
        let mut seen = self.clone();
        let all = seen
            .machines
            .values_mut()
            .chain(seen.firewalls.values_mut());
        for t in all {
            t.phoned_home = t.machine_id.as_deref().and_then(&phoned_home);
            let Some(machine) = t.machine.as_ref().and_then(|m| self.capi_machines.get(m)) else {
                continue;
            };
            t.bootstrap = machine.bootstrap;
            t.taken_up = machine.taken_up;
            let set = machine.machine_set.as_deref();
            let released = set.and_then(|s| self.machine_sets.get(s)?.reported);
            t.released = released.map(|r| t.owned.map_or(r, |owned| r.max(owned)));
        }
        seen
    }

    /// What was seen, with when Cluster API logged each Machine provisioned (`provisioned`, by
    /// Machine name) as its Machine's `taken_up`.
    pub fn taken_up_as(&self, provisioned: &BTreeMap<String, Provisioned>) -> Seen {
        let mut seen = self.clone();
        for (name, p) in provisioned {
            seen.capi_machines.entry(name.clone()).or_default().taken_up = Some(p.first);
        }
        seen
    }

    /// When the last of the MachineSets that want replicas first reported them all (what ends
    /// capms's wait for them); `None` while one of them has not, or none wants any.
    pub fn machine_sets_reported(&self) -> Option<f64> {
        let mut last: Option<f64> = None;
        for set in self.machine_sets.values().filter(|s| s.wanted > 0) {
            let reported = set.reported?;
            last = Some(last.map_or(reported, |l| l.max(reported)));
        }
        last
    }

    /// MetalStackMachines a Machine owns.
    pub fn owned_machines(&self) -> usize {
        self.machines.values().filter(|t| t.owned.is_some()).count()
    }

    /// MetalStackMachines ready and still there. Under load Cluster API's MachineSets may create
    /// a few Machines too many and delete them again, so more than the workers can have been
    /// ready at some point; those that are gone do not count.
    pub fn ready_machines(&self) -> usize {
        let present = self.machines.values().filter(|t| t.gone.is_none());
        present.filter(|t| t.ready.is_some()).count()
    }
    pub fn ready_firewalls(&self) -> usize {
        self.firewalls
            .values()
            .filter(|t| t.ready.is_some())
            .count()
    }

    /// One line per object: kind, name and the seconds of each milestone (empty when not
    /// reached), for looking into a run beyond its percentiles.
    pub fn csv(&self) -> String {
        let cell = |t: Option<f64>| t.map_or(String::new(), |t| format!("{t:.3}"));
        let mut out = String::from(
            "kind,name,created,owned,released,bootstrap,allocated,phoned_home,ready,taken_up,gone,machine\n",
        );
        let kinds = [("machine", &self.machines), ("firewall", &self.firewalls)];
        for (kind, objects) in kinds {
            for (name, t) in objects {
                out.push_str(&format!(
                    "{kind},{name},{:.3},{},{},{},{},{},{},{},{},{}\n",
                    t.created,
                    cell(t.owned),
                    cell(t.released),
                    cell(t.bootstrap),
                    cell(t.allocated),
                    cell(t.phoned_home),
                    cell(t.ready),
                    cell(t.taken_up),
                    cell(t.gone),
                    t.machine.as_deref().unwrap_or_default()
                ));
            }
        }
        out
    }

    /// The MetalStackMachine of each Machine, by the Machine's name.
    pub fn machine_names(&self) -> BTreeMap<String, String> {
        let named = self.machines.iter();
        named
            .filter_map(|(msm, t)| Some((t.machine.clone()?, msm.clone())))
            .collect()
    }

    /// Objects not yet gone.
    pub fn present(&self) -> usize {
        let all = self.machines.values().chain(self.firewalls.values());
        all.filter(|t| t.gone.is_none()).count()
    }
}

struct Shared {
    origin: Mutex<Instant>,
    /// The origin on the wall clock, as the apiserver's audit log tells time.
    origin_wall: Mutex<jiff::Timestamp>,
    seen: Mutex<Seen>,
    changed: Notify,
}

pub struct Timelines {
    shared: Arc<Shared>,
    watches: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Timelines {
    /// The watches end with the run they time, not with the benchmark.
    fn drop(&mut self) {
        self.watches.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

impl Timelines {
    /// Watches both kinds in `namespace` from now on.
    pub fn start(client: kube::Client, namespace: &str) -> Timelines {
        let shared = Arc::new(Shared {
            origin: Mutex::new(Instant::now()),
            origin_wall: Mutex::new(jiff::Timestamp::now()),
            seen: Mutex::new(Seen::default()),
            changed: Notify::new(),
        });
        let machines = Api::<MetalStackMachine>::namespaced(client.clone(), namespace);
        let firewalls = Api::<MetalStackFirewall>::namespaced(client.clone(), namespace);
        let capi_machines = Api::<Machine>::namespaced(client.clone(), namespace);
        let machine_sets = Api::<MachineSet>::namespaced(client, namespace);
        let watches = vec![
            tokio::spawn(follow(
                machines,
                shared.clone(),
                milestones(|s| &mut s.machines),
            )),
            tokio::spawn(follow(
                firewalls,
                shared.clone(),
                milestones(|s| &mut s.firewalls),
            )),
            tokio::spawn(follow(capi_machines, shared.clone(), machine_milestones)),
            tokio::spawn(follow(machine_sets, shared.clone(), machine_set_milestones)),
        ];
        Timelines { shared, watches }
    }

    /// Times are counted from `origin` on.
    pub fn set_origin(&self, origin: Instant) {
        *self.shared.origin.lock().expect("lock") = origin;
        let since = jiff::SignedDuration::try_from(origin.elapsed()).unwrap_or_default();
        let now = jiff::Timestamp::now();
        *self.shared.origin_wall.lock().expect("lock") = now.checked_sub(since).unwrap_or(now);
    }

    /// Seconds since the origin.
    pub fn now(&self) -> f64 {
        self.shared
            .origin
            .lock()
            .expect("lock")
            .elapsed()
            .as_secs_f64()
    }

    /// The origin on the wall clock.
    pub fn origin_wall(&self) -> jiff::Timestamp {
        *self.shared.origin_wall.lock().expect("lock")
    }

    pub fn snapshot(&self) -> Seen {
        self.shared.seen.lock().expect("lock").clone()
    }

    /// Waits until `done` holds, or panics naming `what` after `timeout`.
    pub async fn wait(&self, what: &str, timeout: Duration, done: impl Fn(&Seen) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            if done(&self.snapshot()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "bench: timed out after {timeout:?} waiting for {what}"
            );
            let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        }
    }
}

/// Records each event of `api`'s watch with `record` (given the object, whether it went, and the
/// seconds since the origin).
async fn follow<K>(
    api: Api<K>,
    shared: Arc<Shared>,
    record: impl Fn(&mut Seen, &K, bool, f64) + Send + 'static,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let Ok(event) = event else { continue };
        let now = shared.origin.lock().expect("lock").elapsed().as_secs_f64();
        let (obj, gone) = match &event {
            Event::Apply(obj) | Event::InitApply(obj) => (obj, false),
            Event::Delete(obj) => (obj, true),
            Event::Init | Event::InitDone => continue,
        };
        record(&mut shared.seen.lock().expect("lock"), obj, gone, now);
        shared.changed.notify_waiters();
    }
}

/// Records a MetalStackMachine's or MetalStackFirewall's milestones into the map `pick` selects.
fn milestones<K: Tracked>(
    pick: fn(&mut Seen) -> &mut BTreeMap<String, Timeline>,
) -> impl Fn(&mut Seen, &K, bool, f64) {
    move |seen, obj, gone, now| {
        let map = pick(seen);
        if gone {
            if let Some(t) = map.get_mut(&obj.name_any()) {
                t.gone.get_or_insert(now);
            }
            return;
        }
        let t = map.entry(obj.name_any()).or_insert_with(|| Timeline {
            created: now,
            ..Default::default()
        });
        if obj.owned() {
            t.owned.get_or_insert(now);
        }
        if t.machine.is_none() {
            t.machine = obj.machine();
        }
        if obj.allocated() {
            t.allocated.get_or_insert(now);
            let id = obj.provider_id().and_then(|p| p.rsplit('/').next());
            t.machine_id = id.map(str::to_owned);
        }
        if obj.ready() {
            t.ready.get_or_insert(now);
        }
    }
}

/// Records when a Machine named its bootstrap data, and its MachineSet.
fn machine_milestones(seen: &mut Seen, machine: &Machine, gone: bool, now: f64) {
    if gone {
        return;
    }
    let entry = seen.capi_machines.entry(machine.name_any()).or_default();
    if machine.spec.bootstrap.data_secret_name.is_some() {
        entry.bootstrap.get_or_insert(now);
    }
    let owners = machine.owner_references().iter();
    let mut set = owners.filter(|o| o.kind == "MachineSet").map(|o| &o.name);
    if let Some(set) = set.next_back() {
        entry.machine_set = Some(set.clone());
    }
}

/// Records how many replicas a MachineSet wants, and when it first reported them all. A
/// MachineDeployment makes its MachineSet wanting none and scales it up after: that is no
/// report.
fn machine_set_milestones(seen: &mut Seen, set: &MachineSet, gone: bool, now: f64) {
    if gone {
        return;
    }
    let entry = seen.machine_sets.entry(set.name_any()).or_default();
    entry.wanted = usize::try_from(set.spec.replicas.unwrap_or(0)).unwrap_or(0);
    if entry.wanted > 0 && !set.creating() {
        entry.reported.get_or_insert(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(wanted: usize, reported: Option<f64>) -> MachineSetSeen {
        MachineSetSeen { wanted, reported }
    }

    #[test]
    fn machine_sets_reported_once_every_set_wanting_replicas_has() {
        let mut seen = Seen::default();
        assert_eq!(seen.machine_sets_reported(), None, "no MachineSet yet");
        seen.machine_sets.insert("a".into(), set(40, Some(12.5)));
        seen.machine_sets.insert("b".into(), set(40, None));
        seen.machine_sets.insert("old".into(), set(0, None));
        assert_eq!(seen.machine_sets_reported(), None, "b has not reported");
        seen.machine_sets.insert("b".into(), set(40, Some(30.0)));
        seen.machine_sets.insert("c".into(), set(40, Some(20.0)));
        let last = seen.machine_sets_reported();
        assert_eq!(
            last,
            Some(30.0),
            "the last report; one wanting none waits for nothing"
        );
    }
}
