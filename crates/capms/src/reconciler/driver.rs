//! Runs a kind's kube-runtime controller with the engine's reconcile: every reconcile measured
//! (metrics and work queue), failures logged and retried by their category.

use super::queue;
use super::{Category, Context, Error, Reconciler, reconcile};
use crate::metrics::WorkQueues;
use futures::StreamExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `controller` with `R`'s reconcile, measured, until `shutdown`.
pub async fn drive<R>(
    controller: Controller<R::Object>,
    config: &controller::Config,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
    ctx: &Arc<Context>,
) where
    R: Reconciler + 'static,
    R::Object: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let kind = R::Object::kind(&());
    controller
        .with_config(config.clone())
        .graceful_shutdown_on(shutdown)
        .run(
            move |o, c| measured(kind.clone(), o, c, reconcile::<R>),
            error_policy,
            ctx.clone(),
        )
        .for_each(log_outcome(
            R::Object::kind(&()),
            ctx.metrics.queues.clone(),
        ))
        .await
}

fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let kind = K::kind(&());
    ctx.metrics.retry(&kind);
    if error.category() == Category::KubeConflict {
        // Someone else wrote the object first: normal between controllers, and no reason to
        // back off. The watch brings the newer version; the requeue is a safety net.
        tracing::debug!(%kind, object = %obj.name_any(), namespace = obj.namespace().unwrap_or_default(), error = %error, "object changed during reconcile; retrying");
        return Action::requeue(Duration::from_secs(1));
    }
    if error.category() == Category::Metal(metal_api::error::Category::RateLimited) {
        // A token's calls a minute spent: expected while a big cluster on API v2 provisions,
        // said by the object's condition (MetalRateLimited); a warning for each object waiting
        // would fill the log (about 10 a second for 150 machines on one token).
        tracing::debug!(%kind, object = %obj.name_any(), namespace = obj.namespace().unwrap_or_default(), error = %error, "reconcile waits for the token's rate limit");
    } else {
        tracing::warn!(%kind, object = %obj.name_any(), namespace = obj.namespace().unwrap_or_default(), category = error.category().label(), transient = error.category().is_transient(), error = %error, "reconcile failed");
    }
    Action::requeue(ctx.backoff.next_poll(&obj.uid().unwrap_or_default()))
}

/// Runs `reconcile` and records its duration and outcome.
async fn measured<K, F, Fut>(
    kind: Cow<'static, str>,
    obj: Arc<K>,
    ctx: Arc<Context>,
    reconcile: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
    F: Fn(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>>,
{
    let started = Instant::now();
    let deleting = obj.meta().deletion_timestamp.is_some();
    let uid = obj.uid().unwrap_or_default();
    let queued = queue::key(obj.meta().namespace.as_deref(), &obj.name_any());
    ctx.metrics.queues.started(&kind, &queued);
    let result = reconcile(obj, ctx.clone()).await;
    ctx.metrics.queues.finished(&kind, &queued);
    if deleting && result.is_ok() {
        // A deleted object is not polled again: drop its backoff entry.
        ctx.backoff.reset(&uid);
    }
    let outcome = match &result {
        Ok(_) => Ok(()),
        Err(e) => Err(e.category().label()),
    };
    ctx.metrics.reconcile(&kind, outcome, started.elapsed());
    result
}

type ControllerResult<K, E> = Result<(ObjectRef<K>, Action), controller::Error<E, watcher::Error>>;

/// Logs what the controller's stream reports besides reconciles; an object that was woken but
/// is gone leaves its work queue.
fn log_outcome<K, E: std::fmt::Display>(
    kind: Cow<'static, str>,
    queues: WorkQueues,
) -> impl Fn(ControllerResult<K, E>) -> std::future::Ready<()>
where
    K: Resource<DynamicType = ()>,
{
    move |result| {
        if let Err(e) = result {
            if let controller::Error::ObjectNotFound(gone) = &e {
                queues.dropped(&kind, &queue::key(gone.namespace.as_deref(), &gone.name));
            }
            tracing::debug!(kind = %kind, error = %e, "controller event");
        }
        std::future::ready(())
    }
}
