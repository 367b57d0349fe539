//! MetalStackMachine: a metal-stack machine with the bootstrap data of its Machine.
//!
//! `observe` reads, `decide::decide` chooses the next step without I/O, `act` takes it, and
//! `step::reconcile` writes the status once.

pub mod decide;

use super::allocation::{self, Found, Target};
use super::context::*;
use super::step::Reconciler;
use crate::api::{MetalStackCluster, MetalStackMachine, MetalStackMachineStatus};
use crate::capi::{Cluster, Machine as CapiMachine};
use decide::{Live, MachineDecision, Observed, Step};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use metal_api::types::ROLE_MACHINE;

pub use decide::{addresses_of, cloud_config_hostname};

pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/machine";
/// Labels capms puts on a MetalStackMachine once it has a machine: where it stands.
pub const RACK_LABEL: &str = "machine.metal-stack.io/rack";
pub const ASN_LABEL: &str = "machine.metal-stack.io/network.primary.asn";
pub const PURPOSE: &str = "metal-stack.infrastructure.cluster.x-k8s.io/purpose";

/// The MetalStackMachine controller's parts.
pub struct Machines;

impl Reconciler for Machines {
    type Object = MetalStackMachine;
    type Observed = Observed;
    type Step = Step;
    type Status = MetalStackMachineStatus;

    fn status(obj: &MetalStackMachine) -> Option<&MetalStackMachineStatus> {
        obj.status.as_ref()
    }

    async fn observe(obj: &MetalStackMachine, ctx: &Context) -> Result<Observed> {
        observe(obj, ctx).await
    }

    fn decide(obj: &MetalStackMachine, observed: &Observed) -> MachineDecision {
        decide::decide(obj, observed)
    }

    async fn act(obj: &MetalStackMachine, ctx: &Context, step: &Step) -> Result<()> {
        act(obj, ctx, step).await
    }

    fn writes_metal(step: &Step) -> bool {
        matches!(step, Step::Allocate(_) | Step::Free(_))
    }

    fn lets_go(step: &Step) -> bool {
        matches!(step, Step::RemoveFinalizer)
    }

    fn rewrites(step: &Step) -> bool {
        matches!(step, Step::AddFinalizer | Step::Record(_))
    }

    fn report(
        obj: &MetalStackMachine,
        status: MetalStackMachineStatus,
        error: &Error,
        _: Option<&Step>,
    ) -> MetalStackMachineStatus {
        decide::after_failure(obj, status, error)
    }
}

fn identity(msm: &MetalStackMachine) -> std::collections::BTreeMap<String, String> {
    identity_of(OwnerKind::Machine, msm)
}

/// The Cluster a MetalStackMachine belongs to: its cluster-name label (Cluster API sets it), else
/// its Machine's, while the Machine is still there.
async fn cluster_of_deleted(msm: &MetalStackMachine, ctx: &Context) -> Result<Option<String>> {
    if let Some(name) = msm.labels().get(crate::capi::CLUSTER_NAME_LABEL) {
        return Ok(Some(name.clone()));
    }
    let Some(owner) = capi_owner(msm, "Machine") else {
        return Ok(None);
    };
    let ns = msm.namespace().unwrap_or_default();
    let machine = ctx.get::<CapiMachine>(&ns, &owner).await?;
    Ok(machine.map(|m| m.spec.cluster_name))
}

/// Reads what `decide` needs, in its order, stopping at the first gate that is closed.
async fn observe(msm: &MetalStackMachine, ctx: &Context) -> Result<Observed> {
    if is_externally_managed(msm) {
        return Ok(Observed::Unmanaged);
    }
    if msm.metadata.deletion_timestamp.is_some() {
        if !msm.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(Observed::Deleting(None));
        }
        let cluster = cluster_of_deleted(msm, ctx).await?;
        if deletion_hands_off(ctx, msm, cluster.as_deref()).await? {
            return Ok(Observed::HandsOff);
        }
        let ns = msm.namespace().unwrap_or_default();
        let listing = allocation::Listing::of_deleted(ctx, &ns, cluster.as_deref()).await?;
        let owned = allocation::owned(ctx, &identity(msm), listing.as_ref()).await?;
        return Ok(Observed::Deleting(Some(owned)));
    }
    let mut live = Live::default();
    observe_live(msm, ctx, &mut live).await?;
    Ok(Observed::Live(Box::new(live)))
}

async fn observe_live(msm: &MetalStackMachine, ctx: &Context, live: &mut Live) -> Result<()> {
    let ns = msm.namespace().unwrap_or_default();
    let Some(owner) = capi_owner(msm, "Machine") else {
        return Ok(());
    };
    let Some(machine) = ctx.get::<CapiMachine>(&ns, &owner).await? else {
        return Ok(());
    };
    let cluster_name = decide::cluster_name(msm, &machine);
    let secret = machine.spec.bootstrap.data_secret_name.clone();
    live.machine = Some(machine);
    let Some(cluster) = ctx.get::<Cluster>(&ns, &cluster_name).await? else {
        return Ok(());
    };
    let infrastructure = cluster.metal_stack_cluster().map(str::to_owned);
    let paused = paused_reason(msm, Some(&cluster)).is_some();
    live.cluster = Some(cluster);
    if paused || !msm.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    let Some(name) = infrastructure else {
        return Ok(());
    };
    let Some(msc) = ctx.get::<MetalStackCluster>(&ns, &name).await? else {
        return Ok(());
    };
    let provisioned = decide::provisioned_network(&msc).is_some();
    let partition = decide::partition(msm, &msc);
    let listing = allocation::Listing::of(ctx, &msc, msm.status.as_ref().is_some_and(|s| s.ready));
    live.infrastructure = Some(msc);
    let Some(secret) = secret.filter(|_| provisioned) else {
        return Ok(());
    };
    let found = match Target::of(msm.spec.provider_id.as_deref(), &partition, None) {
        Ok(target) => {
            allocation::lookup(ctx, &identity(msm), &target, ROLE_MACHINE, &listing).await?
        }
        // decide names the malformed field; nothing to look up.
        Err(_) => Found::Nothing,
    };
    // The bootstrap data is read only to allocate.
    if found == Found::Nothing {
        live.user_data = bootstrap_data(ctx, &ns, &secret).await?;
    }
    live.found = Some(found);
    Ok(())
}

/// The bootstrap Secret's `value`, if it has one.
async fn bootstrap_data(ctx: &Context, ns: &str, secret: &str) -> Result<Option<String>> {
    let secret = ctx.api::<Secret>(ns).get_opt(secret).await?;
    Ok(secret.and_then(|s| s.data).and_then(|d| {
        d.get("value")
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    }))
}

/// Takes the one step `decide` chose.
async fn act(msm: &MetalStackMachine, ctx: &Context, step: &Step) -> Result<()> {
    let api = ctx.api::<MetalStackMachine>(&msm.namespace().unwrap_or_default());
    match step {
        Step::Nothing => Ok(()),
        Step::AddFinalizer => ensure_finalizer(&api, msm, FINALIZER).await.map(|_| ()),
        Step::Allocate(request) => {
            let detail = format!(" in partition {}", request.partitionid);
            let result = ctx.metal.machine_allocate(request).await;
            allocation::allocated(ctx, &request.tags, &result).await;
            allocation::announce(ctx, msm, "Machine", result, &detail).map(|_| ())
        }
        Step::Record(patch) => {
            api.patch(
                &msm.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
            Ok(())
        }
        Step::Free(id) => allocation::free(ctx, msm, id, "Machine").await,
        Step::RemoveFinalizer => remove_finalizer(&api, msm, FINALIZER).await,
    }
}

#[cfg(test)]
mod tests;
