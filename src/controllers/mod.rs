//! The reconcile loops: MetalStackCluster, MetalStackFirewall and MetalStackMachine, one file
//! each, sharing `context`; `leader` keeps only one replica reconciling.

pub mod allocation;
mod category;
pub mod cluster;
pub mod conditions;
pub mod context;
pub mod firewall;
pub mod leader;
pub mod machine;
pub mod step;
mod wake;

pub use context::{Context, Error, Settings};

use crate::api::{
    MetalStackCluster, MetalStackFirewall, MetalStackFirewallTemplate, MetalStackMachine,
};
use crate::capi::{Cluster, Machine, WATCH_FILTER_LABEL};
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn api<K>(ctx: &Context) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match &ctx.settings.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    }
}

/// Watch config of our own kinds: `--watch-filter` selects by label.
fn own_watch(ctx: &Context) -> watcher::Config {
    match &ctx.settings.watch_filter {
        Some(value) => watcher::Config::default().labels(&format!("{WATCH_FILTER_LABEL}={value}")),
        None => watcher::Config::default(),
    }
}

fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let kind = K::kind(&());
    ctx.metrics.retry(&kind);
    if error.category() == context::Category::KubeConflict {
        // Someone else wrote the object first: normal between controllers, and no reason to
        // back off. The watch brings the newer version; the requeue is a safety net.
        tracing::debug!(%kind, object = %obj.name_any(), namespace = obj.namespace().unwrap_or_default(), error = %error, "object changed during reconcile; retrying");
        return Action::requeue(Duration::from_secs(1));
    }
    tracing::warn!(%kind, object = %obj.name_any(), namespace = obj.namespace().unwrap_or_default(), category = error.category().label(), transient = error.category().is_transient(), error = %error, "reconcile failed");
    Action::requeue(ctx.next_poll(&obj.uid().unwrap_or_default()))
}

/// Runs `reconcile` and records its duration and outcome.
async fn measured<K, F, Fut>(
    kind: std::borrow::Cow<'static, str>,
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
    let key = obj.uid().unwrap_or_default();
    let result = reconcile(obj, ctx.clone()).await;
    if deleting && result.is_ok() {
        // A deleted object is not polled again: drop its backoff entry.
        ctx.reset_poll(&key);
    }
    let outcome = match &result {
        Ok(_) => Ok(()),
        Err(e) => Err(e.category().label()),
    };
    ctx.metrics.reconcile(&kind, outcome, started.elapsed());
    result
}

fn log_outcome<T: std::fmt::Debug, E: std::fmt::Display>(
    kind: std::borrow::Cow<'static, str>,
) -> impl Fn(Result<T, E>) -> std::future::Ready<()> {
    move |result| {
        if let Err(e) = result {
            tracing::debug!(kind = %kind, error = %e, "controller event");
        }
        std::future::ready(())
    }
}

/// Resolves once `store` has its first full listing. kube-runtime's readiness signal wakes only
/// the most recent of several waiters (the controller's own runner waits on it too), so this
/// polls again every 250 ms; once the signal is in, every poll returns at once.
async fn synced<K>(store: &kube::runtime::reflector::Store<K>)
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    while tokio::time::timeout(
        std::time::Duration::from_millis(250),
        store.wait_until_ready(),
    )
    .await
    .is_err()
    {}
}

/// Runs the three controllers until `shutdown` resolves. `caches_synced` turns true once the
/// watch caches of all three have their first full listing.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
    caches_synced: Arc<std::sync::atomic::AtomicBool>,
) {
    let config = controller::Config::default().concurrency(ctx.settings.concurrency);
    let clusters = cluster_controller(&ctx);
    let firewalls = firewall_controller(&ctx);
    let machines = machine_controller(&ctx);
    let stores = (clusters.store(), firewalls.store(), machines.store());
    tokio::spawn(async move {
        tokio::join!(synced(&stores.0), synced(&stores.1), synced(&stores.2));
        tracing::info!("controller caches synced");
        caches_synced.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    tokio::join!(
        drive::<cluster::Clusters>(clusters, &config, shutdown.clone(), &ctx),
        drive::<firewall::Firewalls>(firewalls, &config, shutdown.clone(), &ctx),
        drive::<machine::Machines>(machines, &config, shutdown, &ctx),
    );
}

/// MetalStackClusters, woken by their firewall, their Cluster and the firewall template they
/// name.
fn cluster_controller(ctx: &Context) -> Controller<MetalStackCluster> {
    let controller = Controller::new(api::<MetalStackCluster>(ctx), own_watch(ctx))
        .owns(api::<MetalStackFirewall>(ctx), watcher::Config::default())
        .watches(
            api::<Cluster>(ctx),
            watcher::Config::default(),
            |c: Cluster| {
                let ns = c.namespace().unwrap_or_default();
                c.metal_stack_cluster()
                    .map(|name| ObjectRef::<MetalStackCluster>::new(name).within(&ns))
            },
        );
    // A cluster waiting for its firewall template goes on as soon as the template appears.
    let referencing = controller.store();
    controller.watches(
        api::<MetalStackFirewallTemplate>(ctx),
        watcher::Config::default(),
        move |template: MetalStackFirewallTemplate| {
            cluster::clusters_using_template(&template, &referencing.state())
        },
    )
}

/// MetalStackFirewalls, woken by the MetalStackCluster they belong to and by their Cluster's
/// gates (paused, infrastructure provisioned, deletion).
fn firewall_controller(ctx: &Context) -> Controller<MetalStackFirewall> {
    let changes = wake::ClusterChanges::default();
    Controller::new(api::<MetalStackFirewall>(ctx), own_watch(ctx))
        .watches(
            api::<MetalStackCluster>(ctx),
            watcher::Config::default(),
            |c: MetalStackCluster| {
                let ns = c.namespace().unwrap_or_default();
                let name = cluster::firewall_name(&c.name_any());
                Some(ObjectRef::<MetalStackFirewall>::new(&name).within(&ns))
            },
        )
        .watches(
            api::<Cluster>(ctx),
            watcher::Config::default(),
            move |c: Cluster| {
                changes
                    .gates_changed(&c)
                    .then(|| wake::firewall_of(&c))
                    .flatten()
            },
        )
}

/// MetalStackMachines, woken by their Machine and by their Cluster's gates (paused,
/// infrastructure provisioned, deletion).
fn machine_controller(ctx: &Context) -> Controller<MetalStackMachine> {
    let controller = Controller::new(api::<MetalStackMachine>(ctx), own_watch(ctx)).watches(
        api::<Machine>(ctx),
        watcher::Config::default(),
        |m: Machine| {
            let ns = m.namespace().unwrap_or_default();
            m.metal_stack_machine()
                .map(|name| ObjectRef::<MetalStackMachine>::new(name).within(&ns))
        },
    );
    let machines = controller.store();
    let changes = wake::ClusterChanges::default();
    controller.watches(
        api::<Cluster>(ctx),
        watcher::Config::default(),
        move |c: Cluster| {
            if changes.gates_changed(&c) {
                wake::machines_of(&c, &machines)
            } else {
                Vec::new()
            }
        },
    )
}

/// Runs `controller` with `R`'s reconcile, measured, until `shutdown`.
async fn drive<R>(
    controller: Controller<R::Object>,
    config: &controller::Config,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
    ctx: &Arc<Context>,
) where
    R: step::Reconciler + 'static,
    R::Object: kube::Resource<DynamicType = ()>
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
            move |o, c| measured(kind.clone(), o, c, step::reconcile::<R>),
            error_policy,
            ctx.clone(),
        )
        .for_each(log_outcome(R::Object::kind(&())))
        .await
}
