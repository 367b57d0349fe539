//! The reconcile loops: MetalStackCluster, MetalStackFirewall and MetalStackMachine, one file
//! each, sharing `context`; `leader` keeps only one replica reconciling.

pub mod allocation;
mod category;
pub mod cluster;
pub mod conditions;
pub mod context;
pub mod feeds;
pub mod firewall;
pub mod fleet;
pub mod leader;
pub mod machine;
mod own_writes;
mod slim;
pub mod step;
mod wake;

pub use context::{Context, Error, Settings};

use crate::api::{
    MetalStackCluster, MetalStackFirewall, MetalStackFirewallTemplate, MetalStackMachine,
};
use crate::capi::{Cluster, Machine, WATCH_FILTER_LABEL};
use crate::metrics::WorkQueues;
use crate::ownership::OwnerKind;
use feeds::{Feed, Stores};
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use slim::Slim;
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
    let queued = queue_key(obj.meta().namespace.as_deref(), &obj.name_any());
    ctx.metrics.queues.started(&kind, &queued);
    let result = reconcile(obj, ctx.clone()).await;
    ctx.metrics.queues.finished(&kind, &queued);
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

/// Logs what the controller's stream reports besides reconciles; an object that was woken but
/// is gone leaves its work queue.
fn log_outcome<K, E: std::fmt::Display>(
    kind: std::borrow::Cow<'static, str>,
    queues: WorkQueues,
) -> impl Fn(ControllerResult<K, E>) -> std::future::Ready<()>
where
    K: Resource<DynamicType = ()>,
{
    move |result| {
        if let Err(e) = result {
            if let controller::Error::ObjectNotFound(gone) = &e {
                queues.dropped(&kind, &queue_key(gone.namespace.as_deref(), &gone.name));
            }
            tracing::debug!(kind = %kind, error = %e, "controller event");
        }
        std::future::ready(())
    }
}

type ControllerResult<K, E> = Result<(ObjectRef<K>, Action), controller::Error<E, watcher::Error>>;

/// An object's key in its controller's work queue.
fn queue_key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

/// `mapper`, recording every object it wakes in its controller's work queue.
fn counted<S, K, I>(
    queues: &WorkQueues,
    mapper: impl Fn(S) -> I + Send + Sync + 'static,
) -> impl Fn(S) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()>,
    I: IntoIterator<Item = ObjectRef<K>>,
{
    let queues = queues.clone();
    move |source| {
        let woken: Vec<ObjectRef<K>> = mapper(source).into_iter().collect();
        for r in &woken {
            queues.woken(&K::kind(&()), queue_key(r.namespace.as_deref(), &r.name));
        }
        woken
    }
}

/// `stream` of the controller's own objects, recording each in its work queue.
fn counted_own<K>(
    queues: &WorkQueues,
    stream: feeds::Followed<K>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Send + 'static,
{
    let queues = queues.clone();
    stream.inspect(move |event| {
        if let Ok(obj) = event {
            let key = queue_key(obj.meta().namespace.as_deref(), &obj.name_any());
            queues.woken(&K::kind(&()), key);
        }
    })
}

/// The objects of `kind` whose machine the cluster's listing saw change in metal-api (which
/// sends no events), recorded in their work queue.
fn woken<K>(
    ctx: &Context,
    kind: OwnerKind,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + use<K>
where
    K: Resource<DynamicType = ()>,
{
    let queues = ctx.metrics.queues.clone();
    ctx.fleet.follow(kind).map(move |(namespace, name)| {
        queues.woken(&K::kind(&()), queue_key(Some(&namespace), &name));
        ObjectRef::new(&name).within(&namespace)
    })
}

/// The watches of every kind the controllers follow, one per kind.
struct Feeds {
    clusters: Feed<Cluster>,
    machines: Feed<Machine>,
    metal_stack_clusters: Feed<MetalStackCluster>,
    firewalls: Feed<MetalStackFirewall>,
    metal_stack_machines: Feed<MetalStackMachine>,
    firewall_templates: Feed<MetalStackFirewallTemplate>,
}

impl Feeds {
    fn new(ctx: &Context) -> Feeds {
        Feeds {
            clusters: Feed::new(api::<Slim<Cluster>>(ctx), watcher::Config::default()),
            machines: Feed::new(api::<Slim<Machine>>(ctx), watcher::Config::default()),
            metal_stack_clusters: Feed::new(api::<Slim<MetalStackCluster>>(ctx), own_watch(ctx)),
            firewalls: Feed::new(api::<Slim<MetalStackFirewall>>(ctx), own_watch(ctx)),
            metal_stack_machines: Feed::new(api::<Slim<MetalStackMachine>>(ctx), own_watch(ctx)),
            firewall_templates: Feed::new(
                api::<Slim<MetalStackFirewallTemplate>>(ctx),
                watcher::Config::default(),
            ),
        }
    }

    fn stores(&self) -> Stores {
        Stores {
            clusters: self.clusters.store(),
            machines: self.machines.store(),
            metal_stack_clusters: self.metal_stack_clusters.store(),
            firewalls: self.firewalls.store(),
            metal_stack_machines: self.metal_stack_machines.store(),
            firewall_templates: self.firewall_templates.store(),
        }
    }

    /// Runs every watch until `shutdown`.
    async fn run(self, shutdown: impl Future<Output = ()>) {
        let watches = async {
            tokio::join!(
                self.clusters.run(),
                self.machines.run(),
                self.metal_stack_clusters.run(),
                self.firewalls.run(),
                self.metal_stack_machines.run(),
                self.firewall_templates.run(),
            )
        };
        tokio::select! {
            _ = watches => {}
            _ = shutdown => {}
        }
    }
}

/// Runs the three controllers until `shutdown` resolves. `caches_synced` turns true once every
/// watch cache has its first full listing; reconciles start only then, as they read the caches.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
    caches_synced: Arc<std::sync::atomic::AtomicBool>,
) {
    let config = controller::Config::default().concurrency(ctx.settings.concurrency);
    let mut feeds = Feeds::new(&ctx);
    let stores = feeds.stores();
    // A second run on one context (tests) keeps the first caches; both watch the same kinds.
    let _ = ctx.stores.set(stores.clone());
    let queues = &ctx.metrics.queues;
    for kind in [
        MetalStackCluster::kind(&()),
        MetalStackFirewall::kind(&()),
        MetalStackMachine::kind(&()),
    ] {
        queues.declare(&kind);
    }
    let clusters = cluster_controller(&mut feeds, queues);
    let firewalls = firewall_controller(&mut feeds, &ctx);
    let machines = machine_controller(&mut feeds, &ctx);
    let watching = tokio::spawn(feeds.run(shutdown.clone()));
    tokio::select! {
        _ = stores.synced() => {}
        _ = shutdown.clone() => return,
    }
    tracing::info!("controller caches synced");
    caches_synced.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::join!(
        drive::<cluster::Clusters>(clusters, &config, shutdown.clone(), &ctx),
        drive::<firewall::Firewalls>(firewalls, &config, shutdown.clone(), &ctx),
        drive::<machine::Machines>(machines, &config, shutdown, &ctx),
    );
    let _ = watching.await;
}

/// MetalStackClusters, woken by their own changes (not their status), their firewall, their
/// Cluster's gates and the firewall template they name.
fn cluster_controller(feeds: &mut Feeds, queues: &WorkQueues) -> Controller<MetalStackCluster> {
    let own = feeds.metal_stack_clusters.follow_changes(feeds::own_change);
    // A cluster waiting for its firewall template goes on as soon as the template appears.
    let referencing = feeds.metal_stack_clusters.store();
    Controller::for_stream(counted_own(queues, own), feeds.metal_stack_clusters.store())
        .watches_stream(
            feeds.firewalls.follow(),
            counted(queues, |f: MetalStackFirewall| {
                // Its owners of our kind, as `owns` would wake them.
                let ns = f.namespace().unwrap_or_default();
                let group = format!("{}/", MetalStackCluster::group(&()));
                let owners = f.owner_references().iter().filter(|o| {
                    o.kind == MetalStackCluster::kind(&()) && o.api_version.starts_with(&group)
                });
                owners
                    .map(|o| ObjectRef::<MetalStackCluster>::new(&o.name).within(&ns))
                    .collect::<Vec<_>>()
            }),
        )
        .watches_stream(
            feeds.clusters.follow_changes(wake::cluster_gates),
            counted(queues, |c: Cluster| {
                let ns = c.namespace().unwrap_or_default();
                c.metal_stack_cluster()
                    .map(|name| ObjectRef::<MetalStackCluster>::new(name).within(&ns))
            }),
        )
        .watches_stream(
            feeds.firewall_templates.follow(),
            counted(queues, move |template: MetalStackFirewallTemplate| {
                cluster::clusters_using_template(&template, &referencing.state())
            }),
        )
}

/// MetalStackFirewalls, woken by their own changes (not their status), the MetalStackCluster
/// they belong to, their Cluster's gates (paused, infrastructure provisioned, deletion) and
/// their machine changing stage in metal-api.
fn firewall_controller(feeds: &mut Feeds, ctx: &Context) -> Controller<MetalStackFirewall> {
    let queues = &ctx.metrics.queues;
    let own = feeds.firewalls.follow_changes(feeds::own_change);
    Controller::for_stream(counted_own(queues, own), feeds.firewalls.store())
        .reconcile_on(woken(ctx, OwnerKind::Firewall))
        .watches_stream(
            feeds.metal_stack_clusters.follow(),
            counted(queues, |c: MetalStackCluster| {
                let ns = c.namespace().unwrap_or_default();
                let name = cluster::firewall_name(&c.name_any());
                Some(ObjectRef::<MetalStackFirewall>::new(&name).within(&ns))
            }),
        )
        .watches_stream(
            feeds.clusters.follow_changes(wake::cluster_gates),
            counted(queues, |c| wake::firewall_of(&c)),
        )
}

/// MetalStackMachines, woken by their own changes (not their status), what they read of their
/// Machine, their Cluster's gates (paused, infrastructure provisioned, deletion), their
/// MetalStackCluster's network becoming usable and their machine changing stage in metal-api.
fn machine_controller(feeds: &mut Feeds, ctx: &Context) -> Controller<MetalStackMachine> {
    let queues = &ctx.metrics.queues;
    let own = feeds.metal_stack_machines.follow_changes(feeds::own_change);
    let machines = feeds.metal_stack_machines.store();
    let (clusters, of_cluster) = (feeds.clusters.store(), machines.clone());
    Controller::for_stream(counted_own(queues, own), machines.clone())
        .reconcile_on(woken(ctx, OwnerKind::Machine))
        .watches_stream(
            feeds
                .metal_stack_clusters
                .follow_changes(wake::infrastructure),
            counted(queues, move |msc: MetalStackCluster| {
                wake::machines_on(&msc, &clusters, &of_cluster)
            }),
        )
        .watches_stream(
            feeds.machines.follow_changes(wake::machine_facts),
            counted(queues, |m: Machine| {
                let ns = m.namespace().unwrap_or_default();
                m.metal_stack_machine()
                    .map(|name| ObjectRef::<MetalStackMachine>::new(name).within(&ns))
            }),
        )
        .watches_stream(
            feeds.clusters.follow_changes(wake::cluster_gates),
            counted(queues, move |c: Cluster| wake::machines_of(&c, &machines)),
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
        .for_each(log_outcome(
            R::Object::kind(&()),
            ctx.metrics.queues.clone(),
        ))
        .await
}
