//! What a MetalStackRemediation reconcile reads, in the order `decide` looks at it.

use super::decide::FINALIZER;
use super::model::{ClusterRecord, ControlPlaneFacts, Live, MetalFacts, Observed};
use crate::api::remediation::{MetalStackRemediation, RemediationPhase};
use crate::api::{MetalStackCluster, MetalStackMachine};
use crate::capi::{Cluster, KubeadmControlPlane, Machine as CapiMachine};
use crate::ownership::retired_machines;
use crate::reconciler::gates::{
    capi_owner, deletion_hands_off, is_externally_managed, paused_reason,
};
use crate::reconciler::writes::has_finalizer;
use crate::reconciler::{Context, During, Result};
use kube::ResourceExt;
use metal_api::ProviderId;
use metal_api::types::event;

pub async fn observe(msr: &MetalStackRemediation, ctx: &Context) -> Result<Observed> {
    if is_externally_managed(msr) {
        return Ok(Observed::Unmanaged);
    }
    let ns = msr.namespace().unwrap_or_default();
    // The MachineHealthCheck names the remediation after the Machine and makes it its owner.
    let name = capi_owner(msr, "Machine").unwrap_or_else(|| msr.name_any());
    let machine = ctx.get::<CapiMachine>(&ns, &name).await?;
    let mut live = Live {
        machine,
        now: jiff::Timestamp::now(),
        ..Live::default()
    };
    let cluster = live.machine.as_ref().map(|m| m.spec.cluster_name.clone());
    if msr.metadata.deletion_timestamp.is_some() {
        if !has_finalizer(msr, FINALIZER) {
            return Ok(Observed::Deleting(None));
        }
        // Deleted by clusterctl move after moving it, or while paused: the Machine is the
        // moved copy's to wind up.
        if deletion_hands_off(ctx, msr, cluster.as_deref()).await? {
            return Ok(Observed::HandsOff);
        }
        return Ok(Observed::Deleting(Some(live)));
    }
    let Some(machine) = &live.machine else {
        return Ok(Observed::Live(Box::new(live)));
    };
    // Paused (a clusterctl move, an operator), nothing is power-cycled: the Cluster API
    // controllers hold still too.
    let cluster = ctx.get::<Cluster>(&ns, &machine.spec.cluster_name).await?;
    if paused_reason(msr, cluster.as_ref()).is_some() {
        return Ok(Observed::HandsOff);
    }
    if let Some(name) = cluster.as_ref().and_then(Cluster::metal_stack_cluster) {
        let msc = ctx.get::<MetalStackCluster>(&ns, name).await?;
        live.cluster_record = msc.map(|msc| ClusterRecord {
            name: name.to_owned(),
            retired: retired_machines(&msc),
        });
    }
    let Some(infrastructure) = machine.metal_stack_machine() else {
        return Ok(Observed::Live(Box::new(live)));
    };
    live.infrastructure = ctx.get::<MetalStackMachine>(&ns, infrastructure).await?;
    let provider_id = live
        .infrastructure
        .as_ref()
        .and_then(|m| m.spec.provider_id.as_deref());
    if let Some(id) = provider_id.and_then(|p| ProviderId::parse(p).ok()) {
        let metal = ctx.metal_in(&ns, Some(&machine.spec.cluster_name)).await?;
        live.metal = metal_facts(&metal, &id.machine_id).await?;
    }
    if machine.is_control_plane() {
        live.control_plane = Some(control_plane(ctx, msr, machine).await?);
    }
    Ok(Observed::Live(Box::new(live)))
}

/// The metal-api client of the cluster of the Machine `msr` remediates.
pub(super) async fn metal_of(
    msr: &MetalStackRemediation,
    ctx: &Context,
) -> Result<metal_api::Client> {
    let ns = msr.namespace().unwrap_or_default();
    let name = capi_owner(msr, "Machine").unwrap_or_else(|| msr.name_any());
    let machine = ctx.get::<CapiMachine>(&ns, &name).await?;
    let cluster = machine.map(|m| m.spec.cluster_name);
    ctx.metal_in(&ns, cluster.as_deref()).await
}

/// What metal-api shows of machine `id`; None when it does not know it.
async fn metal_facts(metal: &metal_api::Client, id: &str) -> Result<Option<MetalFacts>> {
    let machine = match metal.machine(id).await {
        Ok(machine) => machine,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let log = &machine.events.log;
    let planned = log.iter().find(|e| e.event == event::PLANNED_REBOOT);
    let newest = log.first().filter(|e| e.event == event::PHONED_HOME);
    let image = machine
        .allocation
        .as_ref()
        .and_then(|a| a.image.as_ref())
        .map(|i| i.id.clone());
    Ok(Some(MetalFacts {
        id: machine.id.clone(),
        image: image.unwrap_or_default(),
        last_planned_reboot: planned.map(|e| e.time),
        phoned_home: newest.map(|e| e.time),
        reinstallable: !metal.is_v2(),
    }))
}

/// What the control plane of `machine` can spare: its KubeadmControlPlane (asked of the
/// apiserver: remediations are rare), and its other machines from the caches.
async fn control_plane(
    ctx: &Context,
    msr: &MetalStackRemediation,
    machine: &CapiMachine,
) -> Result<ControlPlaneFacts> {
    let ns = msr.namespace().unwrap_or_default();
    let control_plane = match capi_owner_any(machine, "KubeadmControlPlane") {
        Some(owner) => ctx
            .api::<KubeadmControlPlane>(&ns)
            .get_opt(&owner)
            .await
            .during(|| format!("reading KubeadmControlPlane {ns}/{owner}"))?,
        None => None,
    };
    let cluster = machine.spec.cluster_name.clone();
    let this = machine.name_any();
    let peers: Vec<(String, bool)> = ctx
        .pick(&ns, |m: &CapiMachine| {
            let peer = m.is_control_plane() && m.spec.cluster_name == cluster;
            (peer && m.name_any() != this).then(|| (m.name_any(), m.node_ready()))
        })
        .await?;
    let remediating: Vec<String> = ctx
        .pick(&ns, |r: &MetalStackRemediation| {
            let running =
                r.status.as_ref().and_then(|s| s.phase) == Some(RemediationPhase::Running);
            running.then(|| r.name_any())
        })
        .await?;
    Ok(ControlPlaneFacts {
        control_plane,
        other_ready: peers.iter().filter(|(_, ready)| *ready).count(),
        other_remediating: peers
            .iter()
            .filter(|(name, _)| remediating.contains(name))
            .count(),
    })
}

/// The name of `obj`'s owner of `kind`, whatever its group.
fn capi_owner_any(obj: &CapiMachine, kind: &str) -> Option<String> {
    obj.owner_references()
        .iter()
        .find(|o| o.kind == kind)
        .map(|o| o.name.clone())
}
