//! MetalStackCluster: the cluster's private network, control-plane IP and firewall.
//!
//! `observe` reads, `decide::decide` chooses the next step without I/O (`child` for the
//! firewall, `teardown` for deletion), `act` takes it, and `step::reconcile` writes the status
//! once.

mod child;
pub mod decide;
mod observe;
mod teardown;
#[cfg(test)]
mod tests;

use super::context::*;
use super::step::{Reconciler, Requeue, failed};
use crate::api::{
    MetalStackCluster, MetalStackClusterStatus, MetalStackFirewall, MetalStackFirewallTemplate,
};
use decide::{ClusterDecision, Observed, Step};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use std::sync::Arc;

pub use child::plan_firewall;

pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/cluster";
/// Tag of the control-plane IP, next to the owner tags.
const PURPOSE_CONTROL_PLANE: &str =
    "metal-stack.infrastructure.cluster.x-k8s.io/purpose=control-plane";
pub use crate::ownership::CLUSTER_ID_KEY;

/// Name of the MetalStackFirewall a MetalStackCluster creates.
pub fn firewall_name(cluster: &str) -> String {
    format!("{cluster}-firewall")
}

/// The MetalStackCluster controller's parts.
pub struct Clusters;

impl Reconciler for Clusters {
    type Object = MetalStackCluster;
    type Observed = Observed;
    type Step = Step;
    type Status = MetalStackClusterStatus;

    fn status(obj: &MetalStackCluster) -> Option<&MetalStackClusterStatus> {
        obj.status.as_ref()
    }

    async fn observe(obj: &MetalStackCluster, ctx: &Context) -> Result<Observed> {
        observe::observe(obj, ctx).await
    }

    fn decide(obj: &MetalStackCluster, observed: &Observed) -> ClusterDecision {
        decide::decide(obj, observed)
    }

    async fn act(obj: &MetalStackCluster, ctx: &Context, step: &Step) -> Result<()> {
        act(obj, ctx, step).await
    }

    fn after_failure(
        obj: &MetalStackCluster,
        status: MetalStackClusterStatus,
        error: Error,
        step: Option<&Step>,
    ) -> (MetalStackClusterStatus, Result<Requeue>) {
        if let (Some(Step::FreeNetwork(id)), Error::Metal(e)) = (step, &error)
            && e.status() == Some(422)
        {
            let (status, wait) = teardown::network_still_busy(obj, status, id, e);
            return (status, Ok(wait));
        }
        failed::<Self>(obj, status, error, step)
    }

    fn writes_metal(step: &Step) -> bool {
        matches!(
            step,
            Step::AllocateNetwork(_)
                | Step::AllocateIp(_)
                | Step::ReserveIp(..)
                | Step::FreeIp(_)
                | Step::FreeNetwork(_)
        )
    }

    fn lets_go(step: &Step) -> bool {
        matches!(step, Step::RemoveFinalizer)
    }

    fn rewrites(step: &Step) -> bool {
        matches!(step, Step::AddFinalizer | Step::PatchEndpoint(_))
    }

    fn report(
        obj: &MetalStackCluster,
        status: MetalStackClusterStatus,
        error: &Error,
        step: Option<&Step>,
    ) -> MetalStackClusterStatus {
        decide::after_failure(obj, status, error, step)
    }
}

/// Takes the one step `decide` chose.
async fn act(msc: &MetalStackCluster, ctx: &Context, step: &Step) -> Result<()> {
    let ns = msc.namespace().unwrap_or_default();
    let api = ctx.api::<MetalStackCluster>(&ns);
    match step {
        Step::Nothing => {}
        Step::AddFinalizer => {
            ensure_finalizer(&api, msc, FINALIZER).await?;
        }
        Step::PatchEndpoint(endpoint) => {
            let patch = serde_json::json!({"spec": {"controlPlaneEndpoint": endpoint}});
            let params = PatchParams::default();
            api.patch(&msc.name_any(), &params, &Patch::Merge(&patch))
                .await?;
        }
        Step::CreateFirewall(fw) => {
            apply_firewall(ctx, &ns, fw).await?;
            let note = format!("created MetalStackFirewall {}", fw.name_any());
            ctx.note(msc, "FirewallCreated", "CreateFirewall", note);
        }
        Step::UpdateFirewall(fw) => {
            apply_firewall(ctx, &ns, fw).await?;
            let note = format!(
                "updated MetalStackFirewall {} to the cluster's firewall spec",
                fw.name_any()
            );
            ctx.note(msc, "FirewallUpdated", "UpdateFirewall", note);
        }
        Step::DeleteFirewall(name) => {
            let firewalls = ctx.api::<MetalStackFirewall>(&ns);
            firewalls.delete(name, &Default::default()).await?;
            let note = format!("deleting MetalStackFirewall {name}");
            ctx.note(msc, "FirewallDeleting", "DeleteFirewall", note);
        }
        Step::RemoveFinalizer => remove_finalizer(&api, msc, FINALIZER).await?,
        metal => act_in_metal_api(msc, ctx, metal).await?,
    }
    Ok(())
}

/// The steps that write to metal-api, each reported by an event.
async fn act_in_metal_api(msc: &MetalStackCluster, ctx: &Context, step: &Step) -> Result<()> {
    let (reason, action, note) = match step {
        Step::AllocateNetwork(request) => {
            let n = ctx.metal.network_allocate(request).await?;
            let note = format!(
                "allocated private network {} ({})",
                n.id,
                n.prefixes.join(", ")
            );
            ("NetworkAllocated", "AllocateNetwork", note)
        }
        Step::AllocateIp(request) => {
            let ip = ctx.metal.ip_allocate(request).await?;
            let note = format!("allocated control-plane IP {}", ip.ipaddress);
            ("ControlPlaneIPAllocated", "AllocateIP", note)
        }
        Step::ReserveIp(host, request) => {
            ctx.metal.ip_allocate_specific(host, request).await?;
            let note = format!("reserved {host} as static control-plane IP");
            ("ControlPlaneIPReserved", "AllocateIP", note)
        }
        Step::FreeIp(address) => match ctx.metal.ip_free(address).await {
            Ok(_) => {
                let note = format!("freed control-plane IP {address}");
                ("ControlPlaneIPFreed", "FreeIP", note)
            }
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        },
        Step::FreeNetwork(id) => match ctx.metal.network_free(id).await {
            Ok(_) => {
                let note = format!("freed private network {id}");
                ("NetworkFreed", "FreeNetwork", note)
            }
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        },
        _ => return Ok(()),
    };
    ctx.note(msc, reason, action, note);
    Ok(())
}

/// Creates or updates the firewall by server-side apply: the fields capms sets are capms's,
/// others' (spec.providerID, written by the firewall controller) stay.
async fn apply_firewall(ctx: &Context, ns: &str, fw: &MetalStackFirewall) -> Result<()> {
    ctx.api::<MetalStackFirewall>(ns)
        .patch(
            &fw.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(fw),
        )
        .await?;
    Ok(())
}

/// The MetalStackClusters (of those in `clusters`) whose firewallTemplateRef names `template`.
pub fn clusters_using_template(
    template: &MetalStackFirewallTemplate,
    clusters: &[Arc<MetalStackCluster>],
) -> Vec<kube::runtime::reflector::ObjectRef<MetalStackCluster>> {
    let name = template.name_any();
    clusters
        .iter()
        .filter(|c| c.namespace() == template.namespace())
        .filter(|c| {
            c.spec
                .firewall_template_ref
                .as_ref()
                .is_some_and(|r| r.name == name)
        })
        .map(|c| kube::runtime::reflector::ObjectRef::from_obj(c.as_ref()))
        .collect()
}
