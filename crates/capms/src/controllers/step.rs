//! The shape every reconcile has: observe (reads only) → decide (a pure function of what was
//! observed: the next step, the status and when to look again) → act (at most one external
//! write) → one status write, skipped when nothing changed.

use super::context::{Context, Error, Result, apply_status};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How long a provisioned object waits before it is looked at again without an event, unless
/// `--sync-period` says otherwise.
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(300);

/// How often a booting machine is looked at. Each look reads its cluster's shared listing (at
/// most about one metal-api find per cluster per second while machines boot), and each new
/// listing wakes the objects whose machine changed stage, so a machine reports ready when any
/// look of its cluster sees it phone home, not only at its own next poll.
pub const BOOTING_POLL: Duration = Duration::from_secs(2);

/// How often a booting object that others wait for is looked at: a cluster's firewall, whose
/// readiness provisions the cluster and so lets its machines allocate. Just over the age a
/// booting look accepts ([`super::allocation::BOOTING_MAX_AGE`]), even its lowest jitter, so each
/// look of a lone firewall lists its cluster anew and it is seen phoning home within about a
/// second (at [`BOOTING_POLL`], about two), for one find per cluster per look.
pub const GATE_POLL: Duration = Duration::from_millis(1300);

/// How far a booting poll strays from its interval, as a fraction of it.
pub const JITTER: f64 = 0.2;

/// `base` ± [`JITTER`], varied by the clock so that a cluster's machines do not poll in step.
fn jittered(base: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let fraction = f64::from(nanos % 1000) / 1000.0; // 0 ≤ fraction < 1
    base.mul_f64(1.0 - JITTER + 2.0 * JITTER * fraction)
}

/// When to reconcile again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Only when the object or something it watches changes.
    AwaitChange,
    /// After a fixed time: waiting on something that sends no watch event here.
    After(Duration),
    /// Waiting on metal-api: the object's growing backoff (2 s, 4 s … 30 s).
    Poll,
    /// Its machine is installing and booting: looked at again every [`BOOTING_POLL`] (jittered,
    /// so a cluster's machines spread), each look served by the cluster's shared listing; the
    /// backoff starts over.
    Booting,
    /// Like `Booting`, for an object others wait for: every [`GATE_POLL`] (jittered).
    BootingGate,
    /// Provisioned (or lost, waiting for the operator): a periodic look only (the sync period),
    /// and the backoff starts over.
    Resync,
    /// At once: the step just taken wrote to metal-api, which sends no watch event, and the
    /// next reconcile observes its result.
    Now,
}

/// What `decide` returns.
#[derive(Debug)]
pub struct Decision<Step, Status> {
    pub step: Step,
    pub status: Status,
    /// When to look again, or the error the reconcile ends with (the status says it too).
    pub next: Result<Requeue>,
}

impl<Step, Status> Decision<Step, Status> {
    pub fn new(step: Step, status: Status, next: Requeue) -> Self {
        Decision {
            step,
            status,
            next: Ok(next),
        }
    }

    pub fn failed(step: Step, status: Status, error: Error) -> Self {
        Decision {
            step,
            status,
            next: Err(error),
        }
    }
}

/// One controller's parts; `reconcile` puts them together the same way for every kind.
pub trait Reconciler {
    type Object: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync;
    type Observed: Send;
    type Step: Send + Sync;
    type Status: Serialize + PartialEq + Clone + Default + Send + Sync;

    fn status(obj: &Self::Object) -> Option<&Self::Status>;

    /// Reads only: everything `decide` needs, in its order, stopping at the first closed gate.
    fn observe(
        obj: &Self::Object,
        ctx: &Context,
    ) -> impl Future<Output = Result<Self::Observed>> + Send;

    /// Pure: the next step, the status and when to look again.
    fn decide(obj: &Self::Object, observed: &Self::Observed) -> Decision<Self::Step, Self::Status>;

    /// Takes the step: at most one external write (and the events that report it).
    fn act(
        obj: &Self::Object,
        ctx: &Context,
        step: &Self::Step,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Does taking `step` write to metal-api?
    fn writes_metal(step: &Self::Step) -> bool;

    /// Does taking `step` remove capms's finalizer (the object is let go)?
    fn lets_go(step: &Self::Step) -> bool;

    /// Does taking `step` write to the object itself (its metadata or spec), so that the watch
    /// cache's copy is outdated until the watch brings the write back?
    fn rewrites(step: &Self::Step) -> bool;

    /// Pure: the status with `error` in its conditions, met while observing (`step` None) or
    /// taking `step`.
    fn report(
        obj: &Self::Object,
        status: Self::Status,
        error: &Error,
        step: Option<&Self::Step>,
    ) -> Self::Status;

    /// Pure: the status after `error` and how the reconcile ends; by default `failed`.
    fn after_failure(
        obj: &Self::Object,
        status: Self::Status,
        error: Error,
        step: Option<&Self::Step>,
    ) -> (Self::Status, Result<Requeue>) {
        failed::<Self>(obj, status, error, step)
    }
}

/// A failure ends the reconcile with the error. metal-api's answers show in the conditions, met
/// while observing or in a step that writes to metal-api; a failed Kubernetes read or write
/// does not (it is retried and logged).
pub fn failed<R: Reconciler + ?Sized>(
    obj: &R::Object,
    status: R::Status,
    error: Error,
    step: Option<&R::Step>,
) -> (R::Status, Result<Requeue>) {
    let reported = match step {
        Some(step) => R::writes_metal(step),
        None => matches!(error, Error::Metal(_)),
    };
    let status = if reported {
        R::report(obj, status, &error, step)
    } else {
        status
    };
    (status, Err(error))
}

/// What observe found, by phase: left alone, being deleted (what is left to tear down, None
/// once capms's finalizer is gone), or live (read up to the first closed gate).
#[derive(Debug, Default)]
pub enum Observed<Live, Left> {
    /// Cluster API's managed-by annotation: another controller owns the object.
    #[default]
    Unmanaged,
    Deleting(Option<Left>),
    /// Being deleted while paused, or by clusterctl move after moving it: its allocations
    /// belong to the moved copy. Nothing is written and nothing freed.
    HandsOff,
    Live(Box<Live>),
}

/// The phases `decide` tells apart.
pub enum Phase<'a, Live, Left> {
    /// No step and no status change: left alone, nothing left to do, or hands off.
    Idle(Requeue),
    Teardown(&'a Left),
    Live(&'a Live),
}

impl<Live, Left> Observed<Live, Left> {
    pub fn phase(&self) -> Phase<'_, Live, Left> {
        match self {
            Observed::Unmanaged | Observed::Deleting(None) => Phase::Idle(Requeue::AwaitChange),
            Observed::HandsOff => Phase::Idle(Requeue::After(HANDS_OFF_RECHECK)),
            Observed::Deleting(Some(left)) => Phase::Teardown(left),
            Observed::Live(live) => Phase::Live(live),
        }
    }
}

/// How often a paused deletion looks again: unpausing a Cluster sends no event to every kind.
pub const HANDS_OFF_RECHECK: Duration = Duration::from_secs(30);

/// observe → decide → act → one status write; a copy from before capms's own latest write
/// waits for the watch's newer one instead.
pub async fn reconcile<R: Reconciler>(obj: Arc<R::Object>, ctx: Arc<Context>) -> Result<Action> {
    if let Some(wait) = ctx.own_writes.hold_back(obj.as_ref()) {
        tracing::debug!(object = %obj.name_any(), "copy older than capms's own write; waiting for the watch");
        return Ok(Action::requeue(wait));
    }
    let api = ctx.api::<R::Object>(&obj.namespace().unwrap_or_default());
    let current = R::status(&obj);
    let (status, next) = match R::observe(&obj, &ctx).await {
        Err(e) => R::after_failure(&obj, current.cloned().unwrap_or_default(), e, None),
        Ok(observed) => {
            let decision = R::decide(&obj, &observed);
            match R::act(&obj, &ctx, &decision.step).await {
                Ok(()) if moot::<R>(&decision.step, &decision.next) => {
                    (current.cloned().unwrap_or_default(), decision.next)
                }
                Ok(()) => {
                    if R::rewrites(&decision.step) {
                        ctx.own_writes.wrote(obj.as_ref());
                    }
                    (decision.status, decision.next)
                }
                Err(e) => R::after_failure(&obj, decision.status, e, Some(&decision.step)),
            }
        }
    };
    conclude(&ctx, &api, obj.as_ref(), current, &status, next).await
}

/// Is the status after taking `step` not worth a write? Not when the very next reconcile, at
/// once, replaces it (it follows a metal-api write), nor once capms let go of the object. Every
/// status write wakes Cluster API's controllers too, which read the object and patch theirs.
fn moot<R: Reconciler>(step: &R::Step, next: &Result<Requeue>) -> bool {
    R::lets_go(step) || (R::writes_metal(step) && matches!(next, Ok(Requeue::Now)))
}

/// The one status write (only when the status changed), then the requeue as an Action.
async fn conclude<K, S>(
    ctx: &Context,
    api: &Api<K>,
    obj: &K,
    current: Option<&S>,
    status: &S,
    next: Result<Requeue>,
) -> Result<Action>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq + Default,
{
    let key = obj.uid().unwrap_or_default();
    // No status yet and nothing to say: nothing to write (objects capms leaves alone stay
    // untouched).
    let unchanged = current.map_or(*status == S::default(), |c| c == status);
    if !unchanged {
        match apply_status(api, obj, status).await {
            Ok(()) => ctx.own_writes.wrote(obj),
            // A step that wrote to metal-api was taken: the next reconcile observes it (and
            // tries the status again) at once, so a refused status write never holds up
            // provisioning; nothing is lost, as everything is found again by its owner tags.
            Err(e) if matches!(next, Ok(Requeue::Now)) => {
                tracing::warn!(object = %obj.name_any(), namespace = obj.namespace().unwrap_or_default(), error = %e, "status write failed after a step; observing the step's result");
                return Ok(Action::requeue(Duration::ZERO));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(match next? {
        Requeue::AwaitChange => Action::await_change(),
        Requeue::After(wait) => Action::requeue(wait),
        Requeue::Poll => Action::requeue(ctx.next_poll(&key)),
        Requeue::Booting => {
            ctx.reset_poll(&key);
            Action::requeue(jittered(BOOTING_POLL))
        }
        Requeue::BootingGate => {
            ctx.reset_poll(&key);
            Action::requeue(jittered(GATE_POLL))
        }
        Requeue::Resync => {
            ctx.reset_poll(&key);
            Action::requeue(ctx.settings.sync_period)
        }
        Requeue::Now => {
            // A metal-api write is progress: whatever is waited for next waits from the start.
            ctx.reset_poll(&key);
            Action::requeue(Duration::ZERO)
        }
    })
}
