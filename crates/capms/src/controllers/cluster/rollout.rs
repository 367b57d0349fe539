//! Rolling the cluster's firewall. A changed firewall spec gets a MetalStackFirewall of its own,
//! named after the spec; the serving firewall is deleted only once the new one is ready, so the
//! private network always has a ready firewall. One rollout at a time: a further change
//! supersedes the firewall rolling in (it is freed), never the serving one. A firewall that does
//! not become ready within the deadline is freed and tried again after a backoff.
//!
//! Everything here is decided from the cluster's firewalls as they are, so a restarted capms
//! resumes a rollout where it stood without making a second firewall.

use super::firewall_name;
use super::model::{ClusterStep, FirewallSeen, Retire};
use crate::api::{FirewallRolloutStatus, MetalStackCluster, MetalStackFirewall, RolloutPhase};
use crate::ownership::{FIREWALL_ROLE_LABEL, ROLLED_IN_ANNOTATION};
use crate::reconciler::Requeue;
use crate::reconciler::conditions::{self, Conditions, Reason, Type};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the cluster's firewall needs: nothing more, or a step (while a ready firewall serves).
pub(crate) enum Outcome {
    Ready,
    /// A ready firewall serves the cluster while the rollout takes this step.
    Serving(ClusterStep, Requeue),
    ClusterStep(ClusterStep, Requeue),
}

/// Has the firewall the spec the cluster wants? spec.providerID is the firewall controller's, not
/// compared.
pub(crate) fn same_spec(current: &MetalStackFirewall, desired: &MetalStackFirewall) -> bool {
    let mut spec = current.spec.clone();
    spec.provider_id.clone_from(&desired.spec.provider_id);
    spec == desired.spec
}

/// Does the firewall lack labels or annotations the cluster sets on it?
pub(crate) fn metadata_differs(current: &MetalStackFirewall, desired: &MetalStackFirewall) -> bool {
    let subset = |want: &Option<BTreeMap<String, String>>, have: &BTreeMap<String, String>| {
        want.iter().flatten().all(|(k, v)| have.get(k) == Some(v))
    };
    !subset(&desired.metadata.labels, current.labels())
        || !subset(&desired.metadata.annotations, current.annotations())
}

/// Is the firewall allocated in metal-api (its spec then no longer applies)?
pub fn allocated(fw: &MetalStackFirewall) -> bool {
    fw.spec.provider_id.is_some() || fw.status.as_ref().is_some_and(|s| s.machine_id.is_some())
}

/// The firewall's status changes bring the cluster back; this is only a safety net.
const SAFETY_NET: Duration = Duration::from_secs(60);

/// Attempts to roll in one spec before capms waits for the next change.
pub(crate) const MAX_ATTEMPTS: u32 = 5;

/// The wait before attempt `failed + 1`: 1, 2, 4, 8 minutes.
pub fn backoff(failed: u32) -> Duration {
    Duration::from_secs(60 << failed.saturating_sub(1).min(4))
}

/// Name of a firewall rolled in for `spec`: the cluster's firewall name and a digest of the
/// spec, the same on every reconcile and after a restart.
pub(crate) fn rolled_name(cluster: &str, fw: &MetalStackFirewall) -> String {
    // The machine is the firewall controller's choice, not part of the spec asked for.
    let mut spec = fw.spec.clone();
    spec.provider_id = None;
    let spec = serde_json::to_vec(&spec).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &spec);
    let hex: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}-{hex}", firewall_name(cluster))
}

/// `desired` as a firewall rolled in for it: its own name and its own machine. A Go provider
/// firewall deployment's machine (spec.managedResourceRef) and its mark in metal-api stay with
/// the firewall made first.
pub fn rolled(cluster: &str, desired: &MetalStackFirewall) -> MetalStackFirewall {
    let mut fw = desired.clone();
    fw.spec.provider_id = None;
    fw.annotations_mut()
        .insert(ROLLED_IN_ANNOTATION.to_owned(), "true".to_owned());
    fw.metadata.name = Some(rolled_name(cluster, &fw));
    fw
}

/// What a firewall is to its cluster, as its role label says.
#[derive(Clone, Copy)]
pub(super) enum Role {
    Serving,
    RollingIn,
    Provisioning,
}

impl Role {
    /// The role of a firewall ready or not, while another firewall serves or none does.
    fn of(ready: bool, others_serve: bool) -> Role {
        match (ready, others_serve) {
            (true, _) => Role::Serving,
            (false, true) => Role::RollingIn,
            (false, false) => Role::Provisioning,
        }
    }
}

pub(super) fn with_role(mut fw: MetalStackFirewall, role: Role) -> MetalStackFirewall {
    let value = match role {
        Role::Serving => "Serving",
        Role::RollingIn => "RollingIn",
        Role::Provisioning => "Provisioning",
    };
    fw.labels_mut()
        .insert(FIREWALL_ROLE_LABEL.to_owned(), value.to_owned());
    fw
}

/// Was `fw` rolled in for a changed spec (rather than being the cluster's first firewall)?
fn is_rolled(fw: &MetalStackFirewall) -> bool {
    fw.annotations().contains_key(ROLLED_IN_ANNOTATION)
}

fn ready(fw: &MetalStackFirewall) -> bool {
    fw.status.as_ref().is_some_and(|s| s.ready)
}

/// What the firewall says about itself (its Ready condition), for messages.
fn said(fw: &MetalStackFirewall) -> String {
    fw.status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, Type::Ready))
        .filter(|c| !c.message.is_empty())
        .map(|c| format!(": {}", c.message))
        .unwrap_or_default()
}

/// Everything the rollout decision reads.
pub(crate) struct Rollout<'a, 'c> {
    pub msc: &'a MetalStackCluster,
    pub desired: MetalStackFirewall,
    pub seen: &'a FirewallSeen,
    pub conditions: &'a mut Conditions<'c>,
    pub status: &'a mut Option<FirewallRolloutStatus>,
}

impl Rollout<'_, '_> {
    fn live(&self) -> impl Iterator<Item = &MetalStackFirewall> {
        self.seen
            .firewalls
            .iter()
            .filter(|f| f.metadata.deletion_timestamp.is_none())
    }

    /// Does `fw` have the current spec? (Labels and annotations are no reason to roll: they are
    /// patched in place.)
    fn current(&self, fw: &MetalStackFirewall) -> bool {
        same_spec(fw, &self.desired)
    }

    /// `fw` as the cluster wants it, under its own name: the first firewall, or a rolled one;
    /// labelled with its role.
    fn wanted_as(&self, fw: &MetalStackFirewall) -> MetalStackFirewall {
        let mut wanted = match is_rolled(fw) {
            true => rolled(&self.msc.name_any(), &self.desired),
            false => self.desired.clone(),
        };
        wanted.metadata.name = Some(fw.name_any());
        let others_serve = self
            .live()
            .any(|o| ready(o) && o.name_any() != fw.name_any());
        with_role(wanted, Role::of(ready(fw), others_serve))
    }

    /// The merge patch that gives `fw` the labels and annotations the cluster sets, if it lacks
    /// some.
    fn relabel(&self, fw: &MetalStackFirewall) -> Option<ClusterStep> {
        let wanted = self.wanted_as(fw);
        metadata_differs(fw, &wanted).then(|| ClusterStep::RelabelFirewall {
            name: fw.name_any(),
            labels: wanted.metadata.labels.unwrap_or_default(),
            annotations: wanted.metadata.annotations.unwrap_or_default(),
        })
    }

    fn set(&mut self, serving: Option<&str>, rolling_in: Option<&str>, phase: RolloutPhase) {
        let status = self.status.get_or_insert_with(Default::default);
        status.serving = serving.map(str::to_owned);
        status.rolling_in = rolling_in.map(str::to_owned);
        status.phase = phase;
    }

    fn rolled_out(&mut self, message: String) {
        let reason = Reason::FirewallRolledOut;
        self.conditions
            .set_true(Type::FirewallRolledOut, reason, message);
        if let Some(status) = self.status.as_mut() {
            status.failed_attempts = 0;
            status.last_failed = None;
            status.last_failure = None;
            status.last_failure_time = None;
        }
    }

    /// The rollout's step, or the firewall of the current spec when it serves alone (the caller
    /// then reports it ready) with the patch of its labels it still needs, if any.
    pub(crate) fn decide(mut self) -> Result<(MetalStackFirewall, Option<ClusterStep>), Outcome> {
        let live: Vec<MetalStackFirewall> = self.live().cloned().collect();
        let serving = live.iter().find(|f| ready(f) && !self.current(f)).cloned();
        // Of two firewalls with the current spec, the ready one; the other goes once it serves.
        let mut targets: Vec<&MetalStackFirewall> =
            live.iter().filter(|f| self.current(f)).collect();
        targets.sort_by_key(|f| !ready(f));
        let target = targets.first().map(|f| (*f).clone());
        // A ready one is relabelled once it serves alone, as the cluster's ready firewall.
        let waiting = target.as_ref().filter(|t| !ready(t));
        if let Some(step) = waiting.and_then(|t| self.relabel(t)) {
            let serves = serving.as_ref().map(ResourceExt::name_any);
            return Err(self.towards(serves.as_deref(), step, Requeue::AwaitChange));
        }
        match target {
            Some(target) if ready(&target) => {
                let alone = self.complete(&target, &live)?;
                let relabel = self.relabel(&alone);
                Ok((alone, relabel))
            }
            Some(target) => Err(match serving {
                Some(serving) => self.rolling_in(&target, &serving),
                None => self.first(&target),
            }),
            None => Err(self.start(&live, serving.as_ref())),
        }
    }

    /// The current spec's firewall is ready: every other goes, one per reconcile.
    fn complete(
        &mut self,
        target: &MetalStackFirewall,
        live: &[MetalStackFirewall],
    ) -> Result<MetalStackFirewall, Outcome> {
        let name = target.name_any();
        self.set(Some(&name), None, RolloutPhase::Stable);
        let Some(other) = live.iter().find(|f| f.name_any() != name) else {
            self.rolled_out(format!(
                "MetalStackFirewall {name} has the current firewall spec"
            ));
            return Ok(target.clone());
        };
        let other = other.name_any();
        let message = format!(
            "MetalStackFirewall {name} is ready; deleting MetalStackFirewall {other}, which it replaces"
        );
        self.rolled_out(message.clone());
        self.conditions
            .set_true(Type::FirewallReady, Reason::FirewallReady, message);
        let step = ClusterStep::RetireFirewall(other, Retire::Replaced);
        Err(Outcome::Serving(step, Requeue::AwaitChange))
    }

    /// The cluster's only firewall, on its way: nothing serves yet.
    fn first(&mut self, target: &MetalStackFirewall) -> Outcome {
        let name = target.name_any();
        self.set(None, None, RolloutPhase::Stable);
        let message = format!(
            "waiting for MetalStackFirewall {name} to become ready{}",
            said(target)
        );
        self.conditions
            .set_false(Type::FirewallReady, Reason::WaitingForFirewall, message);
        Outcome::ClusterStep(ClusterStep::Nothing, Requeue::After(SAFETY_NET))
    }

    /// The current spec's firewall rolls in while `serving` serves; past the deadline it is
    /// freed.
    fn rolling_in(&mut self, target: &MetalStackFirewall, serving: &MetalStackFirewall) -> Outcome {
        let (name, old) = (target.name_any(), serving.name_any());
        let age = crate::reconciler::clock::age(target, self.seen.now).unwrap_or_default();
        let deadline = self.seen.rollout_deadline;
        let serves = format!("MetalStackFirewall {old} is ready and serves");
        if age < deadline {
            self.set(Some(&old), Some(&name), RolloutPhase::RollingOut);
            let message = format!(
                "rolling in MetalStackFirewall {name} for the changed firewall spec{}; {serves} until it is ready",
                said(target)
            );
            self.conditions
                .set_false(Type::FirewallRolledOut, Reason::RollingOut, message);
            self.conditions
                .set_true(Type::FirewallReady, Reason::FirewallReady, serves);
            let next = (deadline - age).min(SAFETY_NET).max(Duration::from_secs(1));
            return Outcome::Serving(ClusterStep::Nothing, Requeue::After(next));
        }
        let failure = format!(
            "MetalStackFirewall {name} did not become ready within {}s{}",
            deadline.as_secs(),
            said(target)
        );
        self.set(Some(&old), None, RolloutPhase::Failed);
        let now = self.seen.now;
        let created = target.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(status) = self.status.as_mut() {
            if status.last_failed.as_deref() != Some(name.as_str()) {
                status.failed_attempts = 0;
            }
            // Counted once per firewall made: seen again (its deletion failed, or the cache
            // lags), the same attempt is not counted twice.
            let counted = status.last_failed.as_deref() == Some(name.as_str())
                && status.last_failure_time.as_ref().map(|t| t.0) >= created;
            if !counted {
                status.failed_attempts = status.failed_attempts.saturating_add(1);
                status.last_failure_time = Some(Time(now));
            }
            status.last_failed = Some(name.clone());
            status.last_failure = Some(failure.clone());
        }
        let message = format!("{failure}; freeing it, {serves}");
        self.conditions
            .set_false(Type::FirewallRolledOut, Reason::RolloutFailed, message);
        self.conditions
            .set_true(Type::FirewallReady, Reason::FirewallReady, serves);
        Outcome::Serving(
            ClusterStep::RetireFirewall(name, Retire::Failed(failure)),
            Requeue::AwaitChange,
        )
    }

    /// No firewall has the current spec: make one, after freeing a superseded one rolling in and
    /// waiting out the backoff of failed attempts.
    fn start(
        &mut self,
        live: &[MetalStackFirewall],
        serving: Option<&MetalStackFirewall>,
    ) -> Outcome {
        let cluster = self.msc.name_any();
        let old = serving.map(ResourceExt::name_any);
        if let [only] = live
            && !allocated(only)
            && !ready(only)
        {
            return self.update_in_place(only);
        }
        // One firewall rolls in at a time: one made for an earlier spec goes first (and so does
        // any not ready beside a serving one).
        let superseded = live
            .iter()
            .find(|f| !ready(f) && (old.is_some() || is_rolled(f)));
        if let Some(superseded) = superseded {
            let name = superseded.name_any();
            self.set(old.as_deref(), Some(&name), RolloutPhase::RollingOut);
            let message = format!(
                "the firewall spec changed again; freeing MetalStackFirewall {name}, which was rolling in, before rolling in the new spec"
            );
            self.conditions
                .set_false(Type::FirewallRolledOut, Reason::RollingOut, message);
            let step = ClusterStep::RetireFirewall(name, Retire::Superseded);
            return self.towards(old.as_deref(), step, Requeue::AwaitChange);
        }
        // With none left (the first, or a lost one deleted), the cluster's firewall keeps the name
        // it always had, once the earlier one is gone.
        let fw = match live.is_empty() {
            true => self.desired.clone(),
            false => rolled(&cluster, &self.desired),
        };
        let fw = with_role(fw, Role::of(false, old.is_some()));
        let name = fw.name_any();
        // Failed attempts first: the failed firewall is often still being deleted meanwhile.
        if let Some(wait) = self.backing_off(&name, old.as_deref()) {
            return wait;
        }
        if self.deleting(&name) {
            let message =
                format!("waiting for the earlier MetalStackFirewall {name} to be deleted");
            self.awaiting(old.as_deref(), &name, message, Reason::WaitingForFirewall);
            let next = Requeue::After(Duration::from_secs(5));
            return self.towards(old.as_deref(), ClusterStep::Nothing, next);
        }
        let message = match &old {
            Some(old) => format!(
                "rolling in MetalStackFirewall {name} for the changed firewall spec; MetalStackFirewall {old} serves until it is ready"
            ),
            None => format!("waiting for MetalStackFirewall {name} to become ready"),
        };
        self.awaiting(old.as_deref(), &name, message, Reason::FirewallCreated);
        let step = match old.is_some() {
            true => ClusterStep::RollInFirewall(Box::new(fw)),
            false => ClusterStep::CreateFirewall(Box::new(fw)),
        };
        self.towards(old.as_deref(), step, Requeue::After(SAFETY_NET))
    }

    /// The cluster's only firewall, not allocated yet: the new spec still applies to it.
    fn update_in_place(&mut self, only: &MetalStackFirewall) -> Outcome {
        let fw = self.wanted_as(only);
        self.set(None, None, RolloutPhase::Stable);
        let message = format!(
            "waiting for MetalStackFirewall {} to become ready",
            only.name_any()
        );
        self.conditions
            .set_false(Type::FirewallReady, Reason::WaitingForFirewall, message);
        Outcome::ClusterStep(
            ClusterStep::UpdateFirewall(Box::new(fw)),
            Requeue::After(SAFETY_NET),
        )
    }

    /// Firewall `name` is on its way: rolling in beside `old`, or (nothing serving) the cluster's
    /// firewall to come, FirewallReady False with `first_reason`.
    fn awaiting(&mut self, old: Option<&str>, name: &str, message: String, first_reason: Reason) {
        match old {
            Some(old) => {
                self.set(Some(old), Some(name), RolloutPhase::RollingOut);
                let reason = Reason::RollingOut;
                self.conditions
                    .set_false(Type::FirewallRolledOut, reason, message);
            }
            None => {
                self.set(None, None, RolloutPhase::Stable);
                self.conditions
                    .set_false(Type::FirewallReady, first_reason, message);
            }
        }
    }

    /// `step` while `old` serves (FirewallReady stays True), else a provisioning step.
    fn towards(&mut self, old: Option<&str>, step: ClusterStep, next: Requeue) -> Outcome {
        let Some(old) = old else {
            return Outcome::ClusterStep(step, next);
        };
        let message = format!("MetalStackFirewall {old} is ready and serves");
        self.conditions
            .set_true(Type::FirewallReady, Reason::FirewallReady, message);
        Outcome::Serving(step, next)
    }

    fn deleting(&self, name: &str) -> bool {
        self.seen
            .firewalls
            .iter()
            .any(|f| f.metadata.deletion_timestamp.is_some() && f.name_any() == name)
    }

    /// While earlier attempts at firewall `name` failed: the wait, or that capms gave up.
    fn backing_off(&mut self, name: &str, serving: Option<&str>) -> Option<Outcome> {
        let status = self.status.clone().unwrap_or_default();
        if status.failed_attempts == 0 || status.last_failed.as_deref() != Some(name) {
            return None;
        }
        let last = status.last_failure.clone().unwrap_or_default();
        let failed = status.failed_attempts;
        self.set(serving, None, RolloutPhase::Failed);
        if failed >= MAX_ATTEMPTS {
            let message = format!(
                "gave up rolling in the changed firewall spec after {failed} attempts; the last: {last}; change the firewall spec to try again"
            );
            self.conditions
                .set_false(Type::FirewallRolledOut, Reason::RolloutFailed, message);
            return Some(self.towards(serving, ClusterStep::Nothing, Requeue::AwaitChange));
        }
        let since = status.last_failure_time.map(|t| t.0);
        let waited = since
            .and_then(|t| self.seen.now.duration_since(t).try_into().ok())
            .unwrap_or(Duration::MAX);
        let wait = backoff(failed);
        if waited >= wait {
            return None;
        }
        let message = format!(
            "attempt {failed} of {MAX_ATTEMPTS} failed: {last}; trying again in {}s",
            (wait - waited).as_secs()
        );
        self.conditions
            .set_false(Type::FirewallRolledOut, Reason::RolloutFailed, message);
        let next = Requeue::After(wait - waited);
        Some(self.towards(serving, ClusterStep::Nothing, next))
    }
}
