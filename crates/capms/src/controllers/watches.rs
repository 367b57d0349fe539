//! The watches the controllers share: one per kind ([`Watches`]), and what every kind reads of
//! its Cluster. A Cluster wakes its MetalStackCluster, firewall and MetalStackMachines only when
//! a gate changes (`spec.paused`, infrastructure provisioned, deletion): without that wake a
//! machine created while its Cluster was paused (clusterctl move creates everything on the
//! target paused, then unpauses the Cluster) would wait for the next resync, as nothing about
//! the machine changes when the Cluster resumes; with only that, Cluster API's frequent status
//! writes to its Clusters wake nothing.

use crate::api::remediation::MetalStackRemediation;
use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{
    MetalStackCluster, MetalStackFirewall, MetalStackFirewallTemplate, MetalStackMachine,
    MetalStackMachineTemplate,
};
use crate::cache::watch::{Feed, fingerprint};
use crate::cache::{Stores, WithoutManagedFields};
use crate::capi::{Cluster, Machine, MachineSet, WATCH_FILTER_LABEL};
use crate::reconciler::Context;
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher;
use std::future::Future;

/// The watches of every kind the controllers follow, one per kind.
pub struct Watches {
    pub clusters: Feed<Cluster>,
    pub machines: Feed<Machine>,
    pub machine_sets: Feed<MachineSet>,
    pub metal_stack_clusters: Feed<MetalStackCluster>,
    pub firewalls: Feed<MetalStackFirewall>,
    pub metal_stack_machines: Feed<MetalStackMachine>,
    pub firewall_templates: Feed<MetalStackFirewallTemplate>,
    pub machine_templates: Feed<MetalStackMachineTemplate>,
    pub firewall_deployments: Feed<MetalStackFirewallDeployment>,
    pub remediations: Feed<MetalStackRemediation>,
}

impl Watches {
    pub fn new(ctx: &Context) -> Watches {
        Watches {
            clusters: Feed::new(
                api::<WithoutManagedFields<Cluster>>(ctx),
                watcher::Config::default(),
            ),
            machines: Feed::new(
                api::<WithoutManagedFields<Machine>>(ctx),
                watcher::Config::default(),
            ),
            machine_sets: Feed::new(
                api::<WithoutManagedFields<MachineSet>>(ctx),
                watcher::Config::default(),
            ),
            metal_stack_clusters: Feed::new(
                api::<WithoutManagedFields<MetalStackCluster>>(ctx),
                own_kind(ctx),
            ),
            firewalls: Feed::new(
                api::<WithoutManagedFields<MetalStackFirewall>>(ctx),
                own_kind(ctx),
            ),
            metal_stack_machines: Feed::new(
                api::<WithoutManagedFields<MetalStackMachine>>(ctx),
                own_kind(ctx),
            ),
            firewall_templates: Feed::new(
                api::<WithoutManagedFields<MetalStackFirewallTemplate>>(ctx),
                watcher::Config::default(),
            ),
            machine_templates: Feed::new(
                api::<WithoutManagedFields<MetalStackMachineTemplate>>(ctx),
                watcher::Config::default(),
            ),
            firewall_deployments: Feed::new(
                api::<WithoutManagedFields<MetalStackFirewallDeployment>>(ctx),
                watcher::Config::default(),
            ),
            remediations: Feed::new(
                api::<WithoutManagedFields<MetalStackRemediation>>(ctx),
                own_kind(ctx),
            ),
        }
    }

    pub fn stores(&self) -> Stores {
        Stores {
            clusters: self.clusters.store(),
            machines: self.machines.store(),
            machine_sets: self.machine_sets.store(),
            metal_stack_clusters: self.metal_stack_clusters.store(),
            firewalls: self.firewalls.store(),
            metal_stack_machines: self.metal_stack_machines.store(),
            firewall_templates: self.firewall_templates.store(),
            machine_templates: self.machine_templates.store(),
            firewall_deployments: self.firewall_deployments.store(),
            remediations: self.remediations.store(),
        }
    }

    /// Runs every watch until `shutdown`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let watches = async {
            tokio::join!(
                self.clusters.run(),
                self.machines.run(),
                self.machine_sets.run(),
                self.metal_stack_clusters.run(),
                self.firewalls.run(),
                self.metal_stack_machines.run(),
                self.firewall_templates.run(),
                self.machine_templates.run(),
                self.firewall_deployments.run(),
                self.remediations.run(),
            )
        };
        tokio::select! {
            _ = watches => {}
            _ = shutdown => {}
        }
    }
}

/// The Api of `K` in the namespace the manager watches (or all).
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
fn own_kind(ctx: &Context) -> watcher::Config {
    match &ctx.settings.watch_filter {
        Some(value) => watcher::Config::default().labels(&format!("{WATCH_FILTER_LABEL}={value}")),
        None => watcher::Config::default(),
    }
}

/// The Cluster facts capms gates on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Gates {
    paused: bool,
    provisioned: bool,
    deleting: bool,
}

impl Gates {
    fn of(cluster: &Cluster) -> Gates {
        Gates {
            paused: cluster.is_paused(),
            provisioned: cluster
                .status
                .as_ref()
                .and_then(|s| s.initialization.as_ref())
                .and_then(|i| i.infrastructure_provisioned)
                .unwrap_or(false),
            deleting: cluster.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// The fingerprint of a Cluster's gates (and identity, so a re-created Cluster wakes too).
pub(crate) fn cluster_gates(cluster: &Cluster) -> u64 {
    fingerprint(&(
        &cluster.metadata.uid,
        Gates::of(cluster),
        cluster.metal_stack_cluster(),
    ))
}

/// A Cluster `c` in `ns`, paused or not, its infrastructure provisioned as given (the watch
/// tests of every kind start from it).
#[cfg(test)]
pub(crate) fn test_cluster(paused: bool, provisioned: Option<bool>) -> Cluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"paused": paused},
        "status": {"initialization": {"infrastructureProvisioned": provisioned}},
    }))
    .unwrap_or_else(|e| panic!("cluster: {e}"))
}

#[cfg(test)]
mod tests {
    use super::test_cluster as cluster;
    use super::*;

    #[test]
    fn only_the_gates_change_a_clusters_fingerprint() {
        let paused = cluster_gates(&cluster(true, Some(true)));
        let mut noisy = cluster(true, Some(true));
        noisy.metadata.resource_version = Some("2".into());
        noisy.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
        assert_eq!(cluster_gates(&noisy), paused, "status and metadata noise");
        let unpaused = cluster_gates(&cluster(false, Some(true)));
        assert_ne!(unpaused, paused, "unpaused");
        assert_ne!(
            cluster_gates(&cluster(false, None)),
            unpaused,
            "provisioned lost"
        );
        let mut deleting = cluster(false, None);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_ne!(
            cluster_gates(&deleting),
            cluster_gates(&cluster(false, None)),
            "deletion"
        );
    }
}
