//! The one step `decide` chose for a MetalStackMachine, taken.

use super::FINALIZER;
use super::model::{MachineStep, identity};
use crate::api::MetalStackMachine;
use crate::controllers::allocation;
use crate::reconciler::writes::{describe, remove_finalizer};
use crate::reconciler::{Context, During, Result};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};

/// Takes the one step `decide` chose.
pub async fn act(msm: &MetalStackMachine, ctx: &Context, step: &MachineStep) -> Result<()> {
    let api = ctx.api::<MetalStackMachine>(&msm.namespace().unwrap_or_default());
    match step {
        MachineStep::Nothing => Ok(()),
        MachineStep::Allocate(request) => {
            let detail = format!(" in partition {}", request.partitionid);
            let metal = metal_of(msm, ctx).await?;
            let result = metal.machine_allocate(request).await;
            allocation::allocated(ctx, &request.tags, &result).await;
            allocation::announce(ctx, msm, "Machine", result, &detail).map(|_| ())
        }
        MachineStep::Record(patch) => {
            api.patch(
                &msm.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .during(|| format!("naming its machine in {}", describe(msm)))?;
            Ok(())
        }
        MachineStep::Free(id) => {
            let metal = metal_of(msm, ctx).await?;
            allocation::free(ctx, &metal, msm, &identity(msm), id, "Machine").await
        }
        MachineStep::RemoveFinalizer => remove_finalizer(&api, msm, FINALIZER).await,
    }
}

/// The metal-api client of `msm`'s cluster, found as observe found it.
async fn metal_of(msm: &MetalStackMachine, ctx: &Context) -> Result<metal_api::Client> {
    let cluster = super::observe::cluster_of(msm, ctx).await?;
    let ns = msm.namespace().unwrap_or_default();
    ctx.metal_in(&ns, cluster.as_deref()).await
}
