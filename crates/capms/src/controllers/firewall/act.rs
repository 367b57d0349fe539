//! The one step `decide` chose for a MetalStackFirewall, taken.

use super::FINALIZER;
use super::model::FirewallStep;
use crate::api::MetalStackFirewall;
use crate::controllers::allocation;
use crate::ownership::firewall_identity;
use crate::reconciler::writes::{describe, remove_finalizer};
use crate::reconciler::{Context, During, Result};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};

/// Takes the one step `decide` chose.
pub async fn act(fw: &MetalStackFirewall, ctx: &Context, step: &FirewallStep) -> Result<()> {
    let api = ctx.api::<MetalStackFirewall>(&fw.namespace().unwrap_or_default());
    match step {
        FirewallStep::Nothing => Ok(()),
        FirewallStep::Allocate(request) => {
            let metal = metal_of(fw, ctx).await?;
            let result = metal.firewall_allocate(request).await;
            allocation::allocated(ctx, &request.machine.tags, &result).await;
            allocation::announce(ctx, fw, "Firewall", result, "").map(|_| ())
        }
        FirewallStep::Record(patch) => {
            api.patch(
                &fw.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .during(|| format!("naming its machine in {}", describe(fw)))?;
            Ok(())
        }
        FirewallStep::Free(id) => {
            let metal = metal_of(fw, ctx).await?;
            allocation::free(ctx, &metal, fw, &firewall_identity(fw), id, "Firewall").await
        }
        FirewallStep::RemoveFinalizer => remove_finalizer(&api, fw, FINALIZER).await,
    }
}

/// The metal-api client of `fw`'s cluster, found as observe found it.
pub(super) async fn metal_of(fw: &MetalStackFirewall, ctx: &Context) -> Result<metal_api::Client> {
    let msc = super::observe::owning_cluster(fw, ctx).await?;
    ctx.metal_for(msc.as_ref()).await
}
