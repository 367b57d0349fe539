//! A replica deleted before capms took it up can leave a machine behind: capms allocates for a
//! replica while its MachineSet is still creating the others, and writes its finalizer only once
//! that wait is over. When Cluster API deletes such a replica meanwhile (its MachineSet scaled
//! down, or made one replica too many), the machine is freed as soon as the deletion is seen,
//! not only after the orphan sweep's grace. The sweep stays the net for a deletion capms did not
//! see (it was down, or its watch started over) and for a free a crash cut short.

use super::FINALIZER;
use super::model::identity;
use super::observe::cluster_of;
use crate::api::MetalStackMachine;
use crate::cache::watch::Followed;
use crate::controllers::allocation;
use crate::reconciler::gates::deletion_hands_off;
use crate::reconciler::writes::has_finalizer;
use crate::reconciler::{Context, Result};
use futures::StreamExt;
use kube::ResourceExt;
use std::time::Duration;

/// How long after a deletion capms looks once more: an allocation that was under way when the
/// replica went has been answered by then.
const SECOND_LOOK: Duration = Duration::from_secs(30);

/// Frees what each replica deleted before capms took it up left allocated, until `shutdown`.
/// A failed look is logged; the second look, and then the orphan sweep, try again.
pub(crate) async fn run(
    ctx: &Context,
    deletions: Followed<MetalStackMachine>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let untaken = deletions.filter(|msm| std::future::ready(untaken(msm)));
    let freeing = untaken.for_each_concurrent(None, |msm| async move {
        for wait in [Duration::ZERO, SECOND_LOOK] {
            tokio::time::sleep(wait).await;
            if let Err(e) = free_left_behind(ctx, &msm).await {
                tracing::warn!(object = %msm.name_any(), namespace = msm.namespace().unwrap_or_default(), error = %e, "could not free what a deleted replica left allocated; the orphan sweep frees it");
            }
        }
    });
    tokio::select! {
        () = freeing => {}
        () = shutdown => {}
    }
}

/// Did `msm` go before capms took it up: no finalizer, no machine named? One capms took up
/// frees its machine itself before it goes.
fn untaken(msm: &MetalStackMachine) -> bool {
    !has_finalizer(msm, FINALIZER) && msm.spec.provider_id.is_none()
}

/// Frees the machines allocated for the deleted `msm`, unless capms must keep its hands off its
/// deletion (paused, clusterctl move) or a new object of its name has taken them over.
async fn free_left_behind(ctx: &Context, msm: &MetalStackMachine) -> Result<()> {
    let (ns, name) = (msm.namespace().unwrap_or_default(), msm.name_any());
    let cluster = cluster_of(msm, ctx).await?;
    if deletion_hands_off(ctx, msm, cluster.as_deref()).await?
        || ctx.get::<MetalStackMachine>(&ns, &name).await?.is_some()
    {
        return Ok(());
    }
    let metal = ctx.metal_in(&ns, cluster.as_deref()).await?;
    let marks = identity(msm);
    let listing = allocation::teardown_query_of(ctx, &ns, cluster.as_deref()).await?;
    let owned = allocation::owned(ctx, &metal, &marks, listing.as_ref(), None).await?;
    for id in owned {
        allocation::free(ctx, &metal, msm, &marks, &id, "Machine").await?;
    }
    Ok(())
}
