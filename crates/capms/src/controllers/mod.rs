//! The reconcile loops: MetalStackCluster, MetalStackFirewall and MetalStackMachine, one folder
//! each of the same shape (`model`, `observe`, `decide`, `act`, `watches`), on the shared
//! watches and the allocation rules machines and firewalls share; and the status of the Go
//! provider's MetalStackFirewallDeployment, and the capacity of MetalStackMachineTemplates, in
//! smaller folders of the same shape.

pub mod allocation;
pub mod cluster;
pub mod firewall;
pub mod firewall_deployment;
pub mod machine;
mod machine_template;
mod orphans;
pub mod remediation;
mod watches;

pub use watches::Watches;

use crate::api::remediation::MetalStackRemediation;
use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{
    MetalStackCluster, MetalStackFirewall, MetalStackMachine, MetalStackMachineTemplate,
};
use crate::reconciler::{Context, drive};
use kube::Resource;
use kube::runtime::controller;
use std::future::Future;
use std::sync::Arc;

/// Runs the controllers until `shutdown` resolves. `caches_synced` turns true once every
/// watch cache has its first full listing; reconciles start only then, as they read the caches.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
    caches_synced: Arc<std::sync::atomic::AtomicBool>,
) {
    let config = controller::Config::default().concurrency(ctx.settings.concurrency);
    let mut watches = Watches::new(&ctx);
    let stores = watches.stores();
    // A second run on one context (tests) keeps the first caches; both watch the same kinds.
    let _ = ctx.caches.set(stores.clone());
    for kind in [
        MetalStackCluster::kind(&()),
        MetalStackFirewall::kind(&()),
        MetalStackMachine::kind(&()),
        MetalStackFirewallDeployment::kind(&()),
        MetalStackRemediation::kind(&()),
        MetalStackMachineTemplate::kind(&()),
    ] {
        ctx.metrics.queues.declare(&kind);
    }
    let clusters = cluster::watches::controller(&mut watches, &ctx);
    let firewalls = firewall::watches::controller(&mut watches, &ctx);
    let machines = machine::watches::controller(&mut watches, &ctx);
    let machines_deleted = watches.metal_stack_machines.follow_deletions();
    let deployments = firewall_deployment::watches::controller(&mut watches, &ctx);
    let remediations = remediation::watches::controller(&mut watches, &ctx);
    let templates = machine_template::watches::controller(&mut watches, &ctx);
    let watching = tokio::spawn(watches.run(shutdown.clone()));
    tokio::select! {
        _ = stores.synced() => {}
        _ = shutdown.clone() => return,
    }
    tracing::info!("controller caches synced");
    caches_synced.store(true, std::sync::atomic::Ordering::SeqCst);
    let until = shutdown.clone();
    let sweep = async {
        let (interval, _) = ctx.settings.orphan_sweep;
        if !interval.is_zero() {
            orphans::run(&ctx, ctx.settings.orphan_sweep, until).await;
        }
    };
    tokio::join!(
        drive::<cluster::Clusters>(clusters, &config, shutdown.clone(), &ctx),
        drive::<firewall::Firewalls>(firewalls, &config, shutdown.clone(), &ctx),
        drive::<machine::Machines>(machines, &config, shutdown.clone(), &ctx),
        drive::<firewall_deployment::FirewallDeployments>(
            deployments,
            &config,
            shutdown.clone(),
            &ctx
        ),
        drive::<remediation::Remediations>(remediations, &config, shutdown.clone(), &ctx),
        drive::<machine_template::MachineTemplates>(templates, &config, shutdown.clone(), &ctx),
        sweep,
        machine::left_behind::run(&ctx, machines_deleted, shutdown.clone()),
    );
    let _ = watching.await;
}

#[cfg(test)]
mod tests {
    use crate::reconciler::Reconciler;
    use kube::Resource;
    use strum::VariantNames;

    /// The code locations where `R` writes to metal-api or Kubernetes: every step but `Nothing`,
    /// and its status write.
    fn write_sites<R: Reconciler>() -> Vec<String>
    where
        R::Step: VariantNames,
    {
        let kind = R::Object::kind(&());
        let steps = R::Step::VARIANTS.iter().filter(|s| **s != "Nothing");
        let mut sites: Vec<String> = steps.map(|s| format!("{kind} {s}")).collect();
        sites.push(format!("{kind} status"));
        sites
    }

    /// `make chaos` kills capms before and after every write of every site that
    /// `tests/controllers/write-sites.txt` lists, and fails for one never killed at; this keeps
    /// that list every write site there is.
    #[test]
    fn the_listed_write_sites_are_every_step_and_status_write_of_every_kind() {
        let mut sites = write_sites::<super::cluster::Clusters>();
        sites.extend(write_sites::<super::firewall::Firewalls>());
        sites.extend(write_sites::<super::machine::Machines>());
        sites.extend(write_sites::<super::firewall_deployment::FirewallDeployments>());
        sites.extend(write_sites::<super::remediation::Remediations>());
        sites.extend(write_sites::<super::machine_template::MachineTemplates>());
        let sweep = <super::orphans::SweepStep as VariantNames>::VARIANTS.iter();
        sites.extend(sweep.map(|step| format!("OrphanSweep {step}")));
        sites.sort();
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/controllers/write-sites.txt"
        );
        let listed = std::fs::read_to_string(file).unwrap_or_default();
        let listed: Vec<&str> = listed.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            listed,
            sites,
            "{file} is out of date; it should read:\n{}",
            sites.join("\n")
        );
    }
}
