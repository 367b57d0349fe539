//! The one step `decide` chose for a MetalStackFirewall, taken.

use super::FINALIZER;
use super::model::Step;
use crate::api::MetalStackFirewall;
use crate::controllers::allocation;
use crate::ownership::firewall_identity;
use crate::reconciler::writes::{describe, ensure_finalizer, remove_finalizer};
use crate::reconciler::{Context, During, Result};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};

/// Takes the one step `decide` chose.
pub async fn act(fw: &MetalStackFirewall, ctx: &Context, step: &Step) -> Result<()> {
    let api = ctx.api::<MetalStackFirewall>(&fw.namespace().unwrap_or_default());
    match step {
        Step::Nothing => Ok(()),
        Step::AddFinalizer => ensure_finalizer(&api, fw, FINALIZER).await.map(|_| ()),
        Step::Allocate(request) => {
            let result = ctx.metal.firewall_allocate(request).await;
            allocation::allocated(ctx, &request.machine.tags, &result).await;
            allocation::announce(ctx, fw, "Firewall", result, "").map(|_| ())
        }
        Step::Record(patch) => {
            api.patch(
                &fw.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .during(|| format!("naming its machine in {}", describe(fw)))?;
            Ok(())
        }
        Step::Free(id) => allocation::free(ctx, fw, &firewall_identity(fw), id, "Firewall").await,
        Step::RemoveFinalizer => remove_finalizer(&api, fw, FINALIZER).await,
    }
}
