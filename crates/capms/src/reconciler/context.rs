//! What every reconcile holds: the clients, the caches, the event publisher, the poll backoff
//! and the settings. Handles only; what is done with them lives with the engine and the
//! controllers.

use super::backoff::Backoff;
use super::events::Events;
use super::handoffs::Handoffs;
use super::own_writes::OwnWrites;
use super::{Result, error::During};
use crate::api::MetalStackCluster;
use crate::cache::catalog::CatalogCache;
use crate::cache::catalogs::Catalogs;
use crate::cache::credentials::MetalClients;
use crate::cache::{Caches, Stored, listings::Listings};
use crate::capi::Cluster;
use kube::Resource;
use kube::api::Api;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

/// How long a provisioned object waits before it is looked at again without an event, unless
/// `--sync-period` says otherwise.
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(300);

/// Real firewalls take minutes to install and phone home.
pub const DEFAULT_FIREWALL_ROLLOUT_DEADLINE: Duration = Duration::from_secs(20 * 60);

/// Creating a MachineSet's replicas takes Cluster API seconds; real machines take minutes to
/// provision, so a replica can well wait this long for its siblings.
pub const DEFAULT_MACHINE_SET_WAIT: Duration = Duration::from_secs(60);

/// No handoff window unless asked for: where the apiserver has CPU to spare, handing machines
/// over as they phone home has Cluster API take them up soonest (`docs/benchmarks.md`).
pub const DEFAULT_HANDOFF_WINDOW: u16 = 0;

/// Settings every controller honours.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Only watch this namespace.
    pub namespace: Option<String>,
    /// Only reconcile objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    /// Concurrent reconciles per controller.
    pub concurrency: u16,
    /// How often a provisioned object is looked at again without an event (what finds a
    /// machine freed outside capms).
    pub sync_period: Duration,
    /// How long a firewall rolling in for a changed spec may take to become ready.
    pub firewall_rollout_deadline: Duration,
    /// How long a new MetalStackMachine waits, untouched, while its MachineSet is still
    /// creating its other replicas (zero: not at all).
    pub machine_set_wait: Duration,
    /// How many machines capms has reported provisioned may wait at once for Cluster API to
    /// take them up (zero: any number).
    pub handoff_window: u16,
    /// How often the orphan sweep looks (zero: never), and how long an allocation's owner must
    /// have been gone before it frees it.
    pub orphan_sweep: (Duration, Duration),
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: None,
            watch_filter: None,
            concurrency: 0,
            sync_period: DEFAULT_SYNC_PERIOD,
            firewall_rollout_deadline: DEFAULT_FIREWALL_ROLLOUT_DEADLINE,
            machine_set_wait: DEFAULT_MACHINE_SET_WAIT,
            handoff_window: DEFAULT_HANDOFF_WINDOW,
            orphan_sweep: (Duration::ZERO, Duration::ZERO),
        }
    }
}

pub struct Context {
    pub client: kube::Client,
    /// capms's own metal-api client, and those of clusters that name credentials.
    pub metal: Arc<MetalClients>,
    pub events: Events,
    pub settings: Settings,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Each cluster's machines as metal-api last listed them.
    pub listings: Listings,
    /// The watch caches, once the controllers run; without them (a standby replica) reads
    /// go to the apiserver.
    pub caches: Caches,
    /// The objects capms wrote to lately: their older copies wait for the watch.
    pub own_writes: OwnWrites,
    /// Each object's growing wait while it polls metal-api.
    pub backoff: Backoff,
    /// The metal-api catalogs admission reads too: capms's own and each credentials Secret's.
    pub catalogs: Arc<Catalogs>,
    /// The machines reported provisioned that Cluster API has yet to take up.
    pub handoffs: Arc<Handoffs>,
}

impl Context {
    pub fn new(
        client: kube::Client,
        settings: Settings,
        instance: Option<String>,
        metrics: Arc<crate::metrics::Metrics>,
        catalogs: Arc<Catalogs>,
    ) -> Context {
        Context {
            handoffs: Arc::new(Handoffs::new(settings.handoff_window.into())),
            events: Events::new(client.clone(), instance),
            metal: catalogs.clients().clone(),
            client,
            settings,
            metrics,
            listings: Default::default(),
            caches: Default::default(),
            own_writes: Default::default(),
            backoff: Default::default(),
            catalogs,
        }
    }

    /// The metal-api client of `msc`'s cluster: made from the Secret its spec.credentialsRef
    /// names, else capms's own.
    pub async fn metal_of(&self, msc: &MetalStackCluster) -> Result<metal_api::Client> {
        let namespace = msc.metadata.namespace.as_deref().unwrap_or_default();
        let secret = msc.spec.credentials_ref.as_ref().map(|r| r.name.as_str());
        Ok(self.metal.of(namespace, secret).await?)
    }

    /// The metal-api catalog of `msc`'s cluster: of the metal-api its credentials reach.
    pub async fn catalog_of(&self, msc: &MetalStackCluster) -> Result<Arc<CatalogCache>> {
        let namespace = msc.metadata.namespace.as_deref().unwrap_or_default();
        let secret = msc.spec.credentials_ref.as_ref().map(|r| r.name.as_str());
        Ok(self.catalogs.of(namespace, secret).await?)
    }

    /// The metal-api client of Cluster `cluster` in `namespace`, for an object of it: its
    /// MetalStackCluster's (see [`Context::metal_of`]); capms's own while neither is found.
    pub async fn metal_in(
        &self,
        namespace: &str,
        cluster: Option<&str>,
    ) -> Result<metal_api::Client> {
        let msc = match cluster {
            Some(cluster) => self.metal_stack_cluster(namespace, cluster).await?,
            None => None,
        };
        self.metal_for(msc.as_ref()).await
    }

    /// The MetalStackCluster of Cluster `cluster` in `namespace`, while both are there.
    pub async fn metal_stack_cluster(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> Result<Option<MetalStackCluster>> {
        match self.get::<Cluster>(namespace, cluster).await? {
            Some(c) => match c.metal_stack_cluster() {
                Some(name) => self.get::<MetalStackCluster>(namespace, name).await,
                None => Ok(None),
            },
            None => Ok(None),
        }
    }

    /// [`Context::metal_of`] `msc`, or capms's own client when there is no MetalStackCluster.
    pub async fn metal_for(&self, msc: Option<&MetalStackCluster>) -> Result<metal_api::Client> {
        match msc {
            Some(msc) => self.metal_of(msc).await,
            None => Ok(self.metal.own().clone()),
        }
    }

    /// The `K` named `name` in `namespace`: from the watch cache, which holds every object the
    /// controllers follow, else (no cache yet: a standby replica) from the apiserver.
    pub async fn get<K>(&self, namespace: &str, name: &str) -> Result<Option<K>>
    where
        K: Stored
            + Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + DeserializeOwned
            + Debug,
    {
        crate::cache::read(&self.caches, &self.client, namespace, name)
            .await
            .during(|| format!("reading {} {namespace}/{name}", K::kind(&())))
    }

    /// Every `K` in `namespace`, from the watch cache (else from the apiserver).
    pub async fn list<K>(&self, namespace: &str) -> Result<Vec<K>>
    where
        K: Stored
            + Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + DeserializeOwned
            + Debug,
    {
        self.pick(namespace, |o: &K| Some(o.clone())).await
    }

    /// What `pick` takes of each `K` in `namespace`, from the watch cache (else from the
    /// apiserver): for a scan that needs a field of many objects, not copies of them.
    pub async fn pick<K, T>(
        &self,
        namespace: &str,
        pick: impl FnMut(&K) -> Option<T>,
    ) -> Result<Vec<T>>
    where
        K: Stored
            + Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + DeserializeOwned
            + Debug,
    {
        crate::cache::pick_all(&self.caches, &self.client, namespace, pick)
            .await
            .during(|| format!("listing the {}s of namespace {namespace}", K::kind(&())))
    }

    /// Api for a namespaced kind in `namespace`.
    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }
}
