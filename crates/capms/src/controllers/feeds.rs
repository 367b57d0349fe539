//! One watch per kind for the whole manager: its reflector store, which every reconcile reads
//! instead of asking the apiserver, and a copy of each event for every controller that follows
//! the kind (filtered by that controller to the changes it reads).

use super::slim::Slim;
use crate::api::{
    MetalStackCluster, MetalStackFirewall, MetalStackFirewallTemplate, MetalStackMachine,
};
use crate::capi::{Cluster, Machine as CapiMachine};
use futures::channel::mpsc;
use futures::{StreamExt, TryStreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use std::fmt::Debug;
use std::hash::{Hash, Hasher};

/// The stores of every kind capms reads, filled by the feeds' watches.
#[derive(Clone)]
pub struct Stores {
    pub clusters: Store<Cluster>,
    pub machines: Store<CapiMachine>,
    pub metal_stack_clusters: Store<MetalStackCluster>,
    pub firewalls: Store<MetalStackFirewall>,
    pub metal_stack_machines: Store<MetalStackMachine>,
    pub firewall_templates: Store<MetalStackFirewallTemplate>,
}

/// A kind whose objects reconciles read from [`Stores`].
pub trait Stored: Resource<DynamicType = ()> + Clone + 'static {
    fn store(stores: &Stores) -> &Store<Self>;
}

macro_rules! stored {
    ($kind:ty, $field:ident) => {
        impl Stored for $kind {
            fn store(stores: &Stores) -> &Store<Self> {
                &stores.$field
            }
        }
    };
}
stored!(Cluster, clusters);
stored!(CapiMachine, machines);
stored!(MetalStackCluster, metal_stack_clusters);
stored!(MetalStackFirewall, firewalls);
stored!(MetalStackMachine, metal_stack_machines);
stored!(MetalStackFirewallTemplate, firewall_templates);

impl Stores {
    /// The stored `K` named `name` in `namespace`.
    pub fn get<K: Stored>(&self, namespace: &str, name: &str) -> Option<K> {
        let key = ObjectRef::new(name).within(namespace);
        K::store(self).get(&key).map(|o| o.as_ref().clone())
    }

    /// Resolves once every store has its first full listing. kube-runtime's readiness signal
    /// wakes only the most recent of several waiters (a controller's runner waits on it too), so
    /// this polls again every 250 ms.
    pub async fn synced(&self) {
        tokio::join!(
            synced(&self.clusters),
            synced(&self.machines),
            synced(&self.metal_stack_clusters),
            synced(&self.firewalls),
            synced(&self.metal_stack_machines),
            synced(&self.firewall_templates),
        );
    }
}

/// Shared by the controllers and the webhooks: the caches, once the controllers run (on the
/// leader). Without them (a standby replica, a reconcile under test) reads go to the apiserver.
pub type Caches = std::sync::Arc<std::sync::OnceLock<Stores>>;

/// The `K` named `name` in `namespace`, from `caches` when the controllers fill them, else from
/// the apiserver.
pub async fn read<K>(
    caches: &Caches,
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Stored
        + Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + serde::de::DeserializeOwned
        + Debug,
{
    match caches.get() {
        Some(stores) => Ok(stores.get::<K>(namespace, name)),
        None => {
            Api::<K>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
        }
    }
}

/// Like [`read`], but a cache miss asks the apiserver too. For the webhooks: the caches of
/// capms's own kinds follow `--watch-filter`, while admission sees every object, so a miss
/// there does not mean the object is absent.
pub async fn read_through<K>(
    caches: &Caches,
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Stored
        + Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + serde::de::DeserializeOwned
        + Debug,
{
    match read(caches, client, namespace, name).await? {
        Some(found) => Ok(Some(found)),
        None => {
            Api::<K>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
        }
    }
}

async fn synced<K>(store: &Store<K>)
where
    K: reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    while tokio::time::timeout(
        std::time::Duration::from_millis(250),
        store.wait_until_ready(),
    )
    .await
    .is_err()
    {}
}

/// A watch of one kind, the store it fills, and its followers.
pub struct Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// Decoding skips the objects' managedFields (see [`Slim`]).
    api: Api<Slim<K>>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    followers: Vec<mpsc::UnboundedSender<K>>,
}

/// A follower's events: every object applied, listed or deleted, after the store has it.
pub type Followed<K> = futures::stream::BoxStream<'static, Result<K, watcher::Error>>;

impl<K> Feed<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    pub fn new(api: Api<Slim<K>>, config: watcher::Config) -> Feed<K> {
        Feed {
            api,
            config,
            writer: reflector::store::Writer::default(),
            followers: Vec::new(),
        }
    }

    pub fn store(&self) -> Store<K> {
        self.writer.as_reader()
    }

    /// One more follower.
    pub fn follow(&mut self) -> Followed<K> {
        let (tx, rx) = mpsc::unbounded();
        self.followers.push(tx);
        rx.map(Ok).boxed()
    }

    /// One more follower that sees an object only when `changed` says something it reads
    /// changed (and always the first time).
    pub fn follow_changes(&mut self, changed: fn(&K) -> u64) -> Followed<K> {
        self.follow()
            .predicate_filter(move |o: &K| Some(changed(o)), Default::default())
            .boxed()
    }

    /// Watches until the stream ends (never, unless the runtime stops).
    pub async fn run(self) {
        let kind = K::kind(&());
        let followers = self.followers;
        watcher::watcher(self.api, self.config)
            .map_ok(unwrap)
            .default_backoff()
            .modify(slim)
            .reflect(self.writer)
            .for_each(|event| {
                match event {
                    Ok(Event::Apply(o) | Event::InitApply(o) | Event::Delete(o)) => {
                        for follower in &followers {
                            // A follower that stopped (shutdown) needs nothing more.
                            let _ = follower.unbounded_send(o.clone());
                        }
                    }
                    Ok(Event::Init | Event::InitDone) => {}
                    Err(e) => tracing::warn!(%kind, error = %e, "watch failed; retrying"),
                }
                std::future::ready(())
            })
            .await
    }
}

/// The decoded object out of its wrapper.
fn unwrap<K>(event: Event<Slim<K>>) -> Event<K> {
    match event {
        Event::Apply(Slim(o)) => Event::Apply(o),
        Event::Delete(Slim(o)) => Event::Delete(o),
        Event::Init => Event::Init,
        Event::InitApply(Slim(o)) => Event::InitApply(o),
        Event::InitDone => Event::InitDone,
    }
}

/// What no reconcile reads and many objects carry: kubectl's copy of the last applied manifest
/// (the field managers' records are not even decoded). Dropped before caching.
fn slim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Hashes `value` into a predicate's fingerprint.
pub fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// What a controller reads of its own objects outside status: a status write (capms's own, the
/// only writer of status) wakes nothing.
pub fn own_change<K: Resource>(obj: &K) -> u64 {
    let m = obj.meta();
    let owners: Vec<_> = m
        .owner_references
        .iter()
        .flatten()
        .map(|o| (&o.kind, &o.name, &o.uid))
        .collect();
    fingerprint(&(
        &m.uid,
        m.generation,
        m.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
        &m.finalizers,
        &m.labels,
        &m.annotations,
        owners,
    ))
}
