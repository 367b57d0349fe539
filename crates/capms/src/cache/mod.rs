//! What capms reads without asking again: one watch cache per kind (filled by [`watch`]), each
//! cluster's machines as metal-api last listed them ([`listings`]), metal-api's master data
//! for admission ([`catalog`]), one such catalog per set of credentials ([`catalogs`]), the
//! parts those of one metal-api share ([`public_parts`]) and each cluster's metal-api client
//! ([`credentials`], made from what its Secret holds: [`credentials_secret`]).
//! Controllers and webhooks both read here; neither imports the other.

/// The half of `Resource` a wrapper around a resource `$inner` takes from it (its kind, group,
/// version and plural); the wrapper adds `meta` and `meta_mut`. Defined before the modules
/// that wrap resources, so that they see it.
macro_rules! resource_type_of {
    ($inner:ident) => {
        type DynamicType = $inner::DynamicType;
        type Scope = $inner::Scope;

        fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
            $inner::kind(dt)
        }
        fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
            $inner::group(dt)
        }
        fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
            $inner::version(dt)
        }
        fn api_version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
            $inner::api_version(dt)
        }
        fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
            $inner::plural(dt)
        }
    };
}

pub mod catalog;
pub mod catalogs;
pub mod credentials;
pub(crate) mod credentials_secret;
pub mod listings;
pub(crate) mod public_parts;
pub(crate) mod size_images;
mod skipped_fields;
pub mod watch;

use crate::api::remediation::MetalStackRemediation;
use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{
    MetalStackCluster, MetalStackFirewall, MetalStackFirewallTemplate, MetalStackMachine,
    MetalStackMachineTemplate,
};
use crate::capi::{Cluster, Machine as CapiMachine, MachineSet};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Resource, ResourceExt};
use std::fmt::Debug;
use std::hash::Hash;

pub(crate) use skipped_fields::WithoutManagedFields;

/// The stores of every kind capms reads, filled by the watches.
#[derive(Clone)]
pub struct Stores {
    pub clusters: Store<Cluster>,
    pub machines: Store<CapiMachine>,
    pub machine_sets: Store<MachineSet>,
    pub metal_stack_clusters: Store<MetalStackCluster>,
    pub firewalls: Store<MetalStackFirewall>,
    pub metal_stack_machines: Store<MetalStackMachine>,
    pub firewall_templates: Store<MetalStackFirewallTemplate>,
    pub machine_templates: Store<MetalStackMachineTemplate>,
    pub firewall_deployments: Store<MetalStackFirewallDeployment>,
    pub remediations: Store<MetalStackRemediation>,
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
stored!(MachineSet, machine_sets);
stored!(MetalStackCluster, metal_stack_clusters);
stored!(MetalStackFirewall, firewalls);
stored!(MetalStackMachine, metal_stack_machines);
stored!(MetalStackFirewallTemplate, firewall_templates);
stored!(MetalStackMachineTemplate, machine_templates);
stored!(MetalStackFirewallDeployment, firewall_deployments);
stored!(MetalStackRemediation, remediations);

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
            synced(&self.machine_sets),
            synced(&self.metal_stack_clusters),
            synced(&self.firewalls),
            synced(&self.metal_stack_machines),
            synced(&self.firewall_templates),
            synced(&self.machine_templates),
            synced(&self.firewall_deployments),
            synced(&self.remediations),
        );
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

/// Shared by the controllers and the webhooks: the caches, once the controllers run (on the
/// leader). Without them (a standby replica) reads go to the apiserver.
pub(crate) type Caches = std::sync::Arc<std::sync::OnceLock<Stores>>;

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

/// What `pick` takes of each `K` in `namespace`, from `caches` when the controllers fill them
/// (without copying the objects), else from the apiserver.
pub(crate) async fn pick_all<K, T>(
    caches: &Caches,
    client: &kube::Client,
    namespace: &str,
    mut pick: impl FnMut(&K) -> Option<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: Stored
        + Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + serde::de::DeserializeOwned
        + Debug,
{
    match caches.get() {
        Some(stores) => Ok(K::store(stores)
            .state()
            .iter()
            .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
            .filter_map(|o| pick(o.as_ref()))
            .collect()),
        None => {
            let api = Api::<K>::namespaced(client.clone(), namespace);
            let items = api.list(&ListParams::default()).await?.items;
            Ok(items.iter().filter_map(pick).collect())
        }
    }
}

/// Like [`read`], but a cache miss asks the apiserver too. For the webhooks: the caches of
/// capms's own kinds follow `--watch-filter`, while admission sees every object, so a miss
/// there does not mean the object is absent.
pub(crate) async fn read_through<K>(
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

/// The names of the objects in `api`'s namespace (firewall templates, firewall deployments),
/// for the message that a named one is missing (asked of the apiserver: only then is it needed).
pub async fn names<K>(api: &Api<K>) -> Result<Vec<String>, kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + Debug,
{
    let list = api.list_metadata(&ListParams::default()).await?;
    Ok(list.items.iter().map(ResourceExt::name_any).collect())
}
