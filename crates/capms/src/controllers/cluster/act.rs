//! The one step `decide` chose for a MetalStackCluster, taken.

use super::FINALIZER;
use super::model::{ClusterStep, Retire};
use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{MetalStackCluster, MetalStackFirewall};
use crate::controllers::allocation::release;
use crate::ownership::{OwnerKind, identity};
use crate::reconciler::writes::{FIELD_MANAGER, describe, ensure_finalizer, remove_finalizer};
use crate::reconciler::{Context, During, Result};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};

/// Takes the one step `decide` chose.
pub async fn act(msc: &MetalStackCluster, ctx: &Context, step: &ClusterStep) -> Result<()> {
    let ns = msc.namespace().unwrap_or_default();
    let api = ctx.api::<MetalStackCluster>(&ns);
    match step {
        ClusterStep::Nothing => {}
        ClusterStep::AddFinalizer => {
            ensure_finalizer(&api, msc, FINALIZER).await?;
        }
        ClusterStep::PatchEndpoint(endpoint) => {
            let patch = serde_json::json!({"spec": {"controlPlaneEndpoint": endpoint}});
            let params = PatchParams::default();
            api.patch(&msc.name_any(), &params, &Patch::Merge(&patch))
                .await
                .during(|| format!("writing spec.controlPlaneEndpoint of {}", describe(msc)))?;
        }
        ClusterStep::CreateFirewall(_)
        | ClusterStep::UpdateFirewall(_)
        | ClusterStep::RollInFirewall(_)
        | ClusterStep::RelabelFirewall { .. }
        | ClusterStep::RetireFirewall(..)
        | ClusterStep::DeleteFirewall(_) => act_on_firewall(msc, ctx, &ns, step).await?,
        ClusterStep::RecordFirewallOnDeployment(name, provider_id) => {
            let patch = serde_json::json!({"spec": {"managedResourceRef": {"name": provider_id}}});
            let what = "writing spec.managedResourceRef of";
            merge_patch::<MetalStackFirewallDeployment>(ctx, &ns, name, &patch, what).await?;
        }
        ClusterStep::ClaimDeployment {
            name,
            owners,
            labels,
        } => {
            let patch =
                serde_json::json!({"metadata": {"ownerReferences": owners, "labels": labels}});
            let what = format!("making {} the controller owner of", describe(msc));
            merge_patch::<MetalStackFirewallDeployment>(ctx, &ns, name, &patch, &what).await?;
        }
        ClusterStep::RemoveFinalizer => remove_finalizer(&api, msc, FINALIZER).await?,
        metal => act_in_metal_api(msc, ctx, metal).await?,
    }
    Ok(())
}

/// The steps on the cluster's MetalStackFirewalls, each reported by an event (and a rollout's
/// by the rollouts metric).
async fn act_on_firewall(
    msc: &MetalStackCluster,
    ctx: &Context,
    ns: &str,
    step: &ClusterStep,
) -> Result<()> {
    let (reason, action, note) = match step {
        ClusterStep::CreateFirewall(fw) => {
            apply_firewall(ctx, ns, fw).await?;
            let note = format!("created MetalStackFirewall {}", fw.name_any());
            ("FirewallCreated", "CreateFirewall", note)
        }
        ClusterStep::UpdateFirewall(fw) => {
            apply_firewall(ctx, ns, fw).await?;
            let name = fw.name_any();
            let note = format!("updated MetalStackFirewall {name} to the cluster's firewall spec");
            ("FirewallUpdated", "UpdateFirewall", note)
        }
        ClusterStep::RollInFirewall(fw) => {
            apply_firewall(ctx, ns, fw).await?;
            ctx.metrics.rollout("started");
            let note = format!(
                "the firewall spec changed: rolling in MetalStackFirewall {}; the serving firewall stays until it is ready",
                fw.name_any()
            );
            ("FirewallRolloutStarted", "RollInFirewall", note)
        }
        ClusterStep::RelabelFirewall {
            name,
            labels,
            annotations,
        } => {
            let patch =
                serde_json::json!({"metadata": {"labels": labels, "annotations": annotations}});
            return merge_patch::<MetalStackFirewall>(ctx, ns, name, &patch, "labelling").await;
        }
        ClusterStep::RetireFirewall(name, why) => {
            delete_firewall(ctx, ns, name).await?;
            let (outcome, reason, note) = retired(name, why);
            ctx.metrics.rollout(outcome);
            (reason, "RetireFirewall", note)
        }
        ClusterStep::DeleteFirewall(name) => {
            delete_firewall(ctx, ns, name).await?;
            let note = format!("deleting MetalStackFirewall {name}");
            ("FirewallDeleting", "DeleteFirewall", note)
        }
        _ => return Ok(()),
    };
    ctx.events.note(msc, reason, action, note);
    Ok(())
}

/// A rollout's firewall going: the metric's outcome, the event's reason and its note.
fn retired(name: &str, why: &Retire) -> (&'static str, &'static str, String) {
    match why {
        Retire::Replaced => (
            "replaced",
            "FirewallRolledOut",
            format!(
                "the new firewall is ready; deleting MetalStackFirewall {name}, which it replaces"
            ),
        ),
        Retire::Superseded => (
            "superseded",
            "FirewallRolloutSuperseded",
            format!(
                "the firewall spec changed again; deleting MetalStackFirewall {name}, which was rolling in"
            ),
        ),
        Retire::Failed(why) => (
            "failed",
            "FirewallRolloutFailed",
            format!("{why}; deleting it, the serving firewall stays"),
        ),
    }
}

/// A merge patch of the `K` named `name`; `what` says what it does, for the error.
async fn merge_patch<K>(
    ctx: &Context,
    ns: &str,
    name: &str,
    patch: &serde_json::Value,
    what: &str,
) -> Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    ctx.api::<K>(ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .during(|| format!("{what} {} {ns}/{name}", K::kind(&())))?;
    Ok(())
}

/// The steps that write to metal-api, each reported by an event.
async fn act_in_metal_api(
    msc: &MetalStackCluster,
    ctx: &Context,
    step: &ClusterStep,
) -> Result<()> {
    let metal = ctx.metal_of(msc).await?;
    let (reason, action, note) = match step {
        ClusterStep::AllocateNetwork(request) => {
            let n = metal.network_allocate(request).await?;
            let note = format!(
                "allocated private network {} ({})",
                n.id,
                n.prefixes.join(", ")
            );
            ("NetworkAllocated", "AllocateNetwork", note)
        }
        ClusterStep::AllocateIp(request) => {
            let ip = metal.ip_allocate(request).await?;
            let note = format!("allocated control-plane IP {}", ip.ipaddress);
            ("ControlPlaneIPAllocated", "AllocateIP", note)
        }
        ClusterStep::ReserveIp(host, request) => {
            metal.ip_allocate_specific(host, request).await?;
            let note = format!("reserved {host} as static control-plane IP");
            ("ControlPlaneIPReserved", "AllocateIP", note)
        }
        ClusterStep::FreeIp(address) => match metal.ip_free(address).await {
            Ok(_) => {
                let note = format!("freed control-plane IP {address}");
                ("ControlPlaneIPFreed", "FreeIP", note)
            }
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        },
        ClusterStep::FreeRetired(id, owner) => {
            let ns = msc.namespace().unwrap_or_default();
            let marks = identity(OwnerKind::Machine, &ns, owner);
            if !release(ctx, &metal, &marks, id).await? {
                return Ok(());
            }
            let note = format!("freed retired machine {id} of MetalStackMachine {ns}/{owner}");
            ("RetiredMachineFreed", "FreeRetired", note)
        }
        ClusterStep::FreeNetwork(id) => match metal.network_free(id).await {
            Ok(_) => {
                let note = format!("freed private network {id}");
                ("NetworkFreed", "FreeNetwork", note)
            }
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        },
        _ => return Ok(()),
    };
    ctx.events.note(msc, reason, action, note);
    Ok(())
}

/// Deletes the firewall; one already gone is fine.
async fn delete_firewall(ctx: &Context, ns: &str, name: &str) -> Result<()> {
    match ctx
        .api::<MetalStackFirewall>(ns)
        .delete(name, &Default::default())
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        deleted => {
            deleted.during(|| format!("deleting MetalStackFirewall {ns}/{name}"))?;
            Ok(())
        }
    }
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
        .await
        .during(|| format!("applying {}", describe(fw)))?;
    Ok(())
}
