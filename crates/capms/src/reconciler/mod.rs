//! The reconciler engine: the shape every reconcile has, and what it needs around it.
//!
//! observe (reads only) → decide (a pure function of what was observed: the next step, the
//! status and when to look again) → act (at most one external write) → one status write,
//! skipped when nothing changed. A kind supplies the parts ([`Reconciler`]); [`reconcile`] puts
//! them together the same way for every kind.

pub mod backoff;
pub(crate) mod clock;
pub mod conditions;
mod context;
pub mod crash_points;
mod driver;
mod error;
pub mod events;
pub mod gates;
pub mod handoffs;
mod own_writes;
pub mod queue;
pub mod writes;

pub use context::{
    Context, DEFAULT_FIREWALL_ROLLOUT_DEADLINE, DEFAULT_HANDOFF_WINDOW, DEFAULT_MACHINE_SET_WAIT,
    DEFAULT_SYNC_PERIOD, Settings,
};
pub use driver::drive;
pub use error::{Category, During, Error, Result};

use backoff::{BOOTING_POLL, GATE_POLL, jittered};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

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

/// What taking a step writes, which tells the engine what follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// No write.
    Nothing,
    /// Other objects only (their watches bring the news).
    Elsewhere,
    /// The object's own metadata or spec: the watch cache's copy is outdated until the watch
    /// brings the write back.
    OwnObject,
    /// metal-api, which sends no watch event: the next reconcile comes at once to observe it.
    MetalApi,
    /// capms's finalizer goes: the object is let go, and no status is written any more.
    LetsGo,
}

/// One controller's parts; [`reconcile`] puts them together the same way for every kind.
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

    /// Pure: what taking `step` writes.
    fn effect(step: &Self::Step) -> Effect;

    /// The step's name (its variant), for the log and the crash points.
    fn step_name(step: &Self::Step) -> &'static str;

    /// Pure: the status after `error`, met while observing (`step` None) or taking `step`, and
    /// how the reconcile ends. Most kinds end with [`failure`].
    fn failed(
        obj: &Self::Object,
        status: Self::Status,
        error: Error,
        step: Option<&Self::Step>,
    ) -> (Self::Status, Result<Requeue>);
}

/// Does a failure belong in the object's conditions? metal-api's answers and a cluster's
/// unusable credentials do, met while observing or in a step that writes to metal-api; a
/// failed Kubernetes read or write does not (it is retried and logged).
pub(crate) fn shows_in_status<R: Reconciler + ?Sized>(
    error: &Error,
    step: Option<&R::Step>,
) -> bool {
    match step {
        Some(step) => R::effect(step) == Effect::MetalApi,
        None => match error {
            Error::Metal(_) => true,
            Error::Credentials(e) => !e.is_transient(),
            _ => false,
        },
    }
}

/// The usual end of a failed reconcile: the status with the error reported by `report` when it
/// [shows in status](shows_in_status), and the error.
pub fn failure<R: Reconciler + ?Sized>(
    status: R::Status,
    error: Error,
    step: Option<&R::Step>,
    report: impl FnOnce(R::Status, &Error) -> R::Status,
) -> (R::Status, Result<Requeue>) {
    let status = match shows_in_status::<R>(&error, step) {
        true => report(status, &error),
        false => status,
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
pub(crate) const HANDS_OFF_RECHECK: Duration = Duration::from_secs(30);

/// observe → decide → act → one status write; a copy from before capms's own latest write
/// waits for the watch's newer one instead.
///
/// Each reconcile that looked ends with a debug line `reconciled` naming the object, the
/// resourceVersion it read, the step it took and when it looks again: what an operator reads to
/// follow an object, and what the tests read to know capms has looked at a change (and what it
/// did about it) instead of sleeping.
pub async fn reconcile<R: Reconciler>(obj: Arc<R::Object>, ctx: Arc<Context>) -> Result<Action> {
    if let Some(wait) = ctx.own_writes.hold_back(obj.as_ref()) {
        tracing::debug!(object = %obj.name_any(), "copy older than capms's own write; waiting for the watch");
        return Ok(Action::requeue(wait));
    }
    let _turn = crash_points::one_at_a_time().await;
    let api = ctx.api::<R::Object>(&obj.namespace().unwrap_or_default());
    let current = R::status(&obj);
    let kind = R::Object::kind(&());
    let mut step = "none";
    let observed = crash_points::within(|| format!("{kind} observe"), R::observe(&obj, &ctx));
    let (status, next) = match observed.await {
        Err(e) => R::failed(&obj, current.cloned().unwrap_or_default(), e, None),
        Ok(observed) => {
            let decision = R::decide(&obj, &observed);
            step = R::step_name(&decision.step);
            let effect = R::effect(&decision.step);
            let act = act::<R>(&obj, &ctx, &decision.step, effect);
            let acted = crash_points::within(|| format!("{kind} {step}"), act).await;
            match acted {
                Ok(()) => {
                    let after = AfterStep::of(effect, &decision.next);
                    if after.note_own_write {
                        ctx.own_writes.wrote(obj.as_ref());
                    }
                    if after.write_status {
                        (decision.status, decision.next)
                    } else {
                        (current.cloned().unwrap_or_default(), decision.next)
                    }
                }
                Err(e) => R::failed(&obj, decision.status, e, Some(&decision.step)),
            }
        }
    };
    // Formatted only when it is logged: this runs for every reconcile.
    let next_text = tracing::enabled!(tracing::Level::DEBUG).then(|| format!("{next:?}"));
    let concluded = conclude(&ctx, &api, obj.as_ref(), current, &status, next).await;
    if let Some(next) = next_text {
        tracing::debug!(
            object = %writes::describe(obj.as_ref()),
            resource_version = %obj.resource_version().unwrap_or_default(),
            step = %step,
            next = %next,
            "reconciled"
        );
    }
    concluded
}

/// Takes `step`; a step that writes to Kubernetes has a crash point before and after its write
/// (metal-api's calls have theirs in the client).
async fn act<R: Reconciler>(
    obj: &R::Object,
    ctx: &Context,
    step: &R::Step,
    effect: Effect,
) -> Result<()> {
    let kube = matches!(
        effect,
        Effect::OwnObject | Effect::Elsewhere | Effect::LetsGo
    );
    let write = || "Kubernetes write".to_owned();
    if kube {
        crash_points::passed(write, crash_points::Moment::Before);
    }
    let acted = R::act(obj, ctx, step).await;
    if kube {
        crash_points::passed(write, crash_points::Moment::After);
    }
    acted
}

/// What follows a successful step.
#[derive(Debug, PartialEq)]
struct AfterStep {
    /// capms wrote the object itself: a copy from before that write waits for the watch's
    /// newer one. Also when the status is moot (naming a machine, then at once again): under
    /// load the watch lags, and the next reconcile would act on the old copy again.
    note_own_write: bool,
    /// The decided status is written (see [`moot`]).
    write_status: bool,
}

impl AfterStep {
    fn of(effect: Effect, next: &Result<Requeue>) -> AfterStep {
        AfterStep {
            note_own_write: effect == Effect::OwnObject,
            write_status: !moot(effect, next),
        }
    }
}

/// Is the status after a step with `effect` not worth a write? Not when the very next
/// reconcile, at once, replaces it (it follows a metal-api write, or a write to the object's
/// own spec that its conditions' observed generation must follow), nor once capms let go of
/// the object. Every status write wakes Cluster API's controllers too, which read the object
/// and patch theirs.
fn moot(effect: Effect, next: &Result<Requeue>) -> bool {
    let replaced = matches!(effect, Effect::MetalApi | Effect::OwnObject);
    effect == Effect::LetsGo || (replaced && matches!(next, Ok(Requeue::Now)))
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
    // No status yet and nothing to say: nothing to write (objects capms leaves alone stay
    // untouched).
    let unchanged = current.map_or(*status == S::default(), |c| c == status);
    if !unchanged {
        let write = async {
            let report = || "Kubernetes status".to_owned();
            crash_points::passed(report, crash_points::Moment::Before);
            let written = writes::apply_status(api, obj, status).await;
            crash_points::passed(report, crash_points::Moment::After);
            written
        };
        let site = || format!("{} status", K::kind(&()));
        match crash_points::within(site, write).await {
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
    Ok(action(ctx, &obj.uid().unwrap_or_default(), next?))
}

/// The Action of `next` for the object with uid `key`, restarting its backoff on progress.
fn action(ctx: &Context, key: &str, next: Requeue) -> Action {
    match next {
        Requeue::AwaitChange => Action::await_change(),
        Requeue::After(wait) => Action::requeue(wait),
        Requeue::Poll => Action::requeue(ctx.backoff.next_poll(key)),
        Requeue::Booting => {
            ctx.backoff.reset(key);
            Action::requeue(jittered(BOOTING_POLL))
        }
        Requeue::BootingGate => {
            ctx.backoff.reset(key);
            Action::requeue(jittered(GATE_POLL))
        }
        Requeue::Resync => {
            ctx.backoff.reset(key);
            Action::requeue(ctx.settings.sync_period)
        }
        Requeue::Now => {
            // A metal-api write is progress: whatever is waited for next waits from the start.
            ctx.backoff.reset(key);
            Action::requeue(Duration::ZERO)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_the_next_reconcile_replaces_at_once_is_not_written() {
        for effect in [Effect::MetalApi, Effect::OwnObject] {
            assert!(moot(effect, &Ok(Requeue::Now)), "{effect:?}");
            assert!(!moot(effect, &Ok(Requeue::Poll)), "{effect:?}");
        }
        assert!(moot(Effect::LetsGo, &Ok(Requeue::AwaitChange)));
        assert!(!moot(Effect::Nothing, &Ok(Requeue::Now)));
    }

    #[test]
    fn every_write_to_the_object_itself_is_noted_also_when_its_status_is_moot() {
        let naming = AfterStep::of(Effect::OwnObject, &Ok(Requeue::Now));
        assert_eq!(
            naming,
            AfterStep {
                note_own_write: true,
                write_status: false
            }
        );
        let finalizer = AfterStep::of(Effect::OwnObject, &Ok(Requeue::AwaitChange));
        assert!(finalizer.note_own_write && finalizer.write_status);
        // Not a write to the object, or (its finalizer removed) one after which it goes away.
        for effect in [Effect::MetalApi, Effect::Nothing, Effect::LetsGo] {
            let after = AfterStep::of(effect, &Ok(Requeue::Now));
            assert!(!after.note_own_write, "{effect:?}");
        }
    }
}
