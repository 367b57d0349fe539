//! What a MetalStackMachine reconcile reads, in the order `decide` looks at it.

use super::FINALIZER;
use super::model::{
    Live, MachineGate, MachineInputs, MachineSetPace, Observed, RackCandidates, cluster_name,
    identity, partition, provisioned_network,
};
use crate::api::{MetalStackCluster, MetalStackMachine};
use crate::capi::{Cluster, Machine as CapiMachine, MachineSet};
use crate::controllers::allocation::{self, Found, Target};
use crate::ownership::retired_machines;
use crate::reconciler::gates::{
    capi_owner, deletion_hands_off, is_externally_managed, paused_reason,
};
use crate::reconciler::handoffs::Handoff;
use crate::reconciler::writes::has_finalizer;
use crate::reconciler::{Context, During, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use metal_api::catalog::MachineSummary;
use metal_api::types::{MachineFindRequest, MachineHealth, ROLE_MACHINE};
use std::collections::BTreeSet;
use std::time::Instant;

/// The Cluster a MetalStackMachine belongs to: its cluster-name label (Cluster API sets it), else
/// its Machine's, while the Machine is still there.
pub(super) async fn cluster_of(msm: &MetalStackMachine, ctx: &Context) -> Result<Option<String>> {
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

/// The machines the MetalStackCluster of Cluster `cluster` records as retired, read from the
/// apiserver, not the watch cache: a record written just before the deletion may not have
/// reached the cache yet, and a retired machine freed cannot be had back. (A remediation gives
/// its Machine up only once its cache shows the record; a Machine deleted for another reason
/// while the record is written, or a record written by hand, does not wait.)
async fn retired_of(ctx: &Context, ns: &str, cluster: Option<&str>) -> Result<BTreeSet<String>> {
    let Some(cluster) = cluster else {
        return Ok(BTreeSet::new());
    };
    let cluster = ctx.get::<Cluster>(ns, cluster).await?;
    let Some(name) = cluster.as_ref().and_then(Cluster::metal_stack_cluster) else {
        return Ok(BTreeSet::new());
    };
    let msc = ctx
        .api::<MetalStackCluster>(ns)
        .get_opt(name)
        .await
        .during(|| format!("reading the retired machines of MetalStackCluster {ns}/{name}"))?;
    Ok(msc.map(|msc| retired_machines(&msc)).unwrap_or_default())
}

/// Reads what `decide` needs, in its order, stopping at the first gate that is closed.
pub async fn observe(msm: &MetalStackMachine, ctx: &Context) -> Result<Observed> {
    if is_externally_managed(msm) {
        return Ok(Observed::Unmanaged);
    }
    if msm.metadata.deletion_timestamp.is_some() {
        if !has_finalizer(msm, FINALIZER) {
            return Ok(Observed::Deleting(None));
        }
        let cluster = cluster_of(msm, ctx).await?;
        if deletion_hands_off(ctx, msm, cluster.as_deref()).await? {
            return Ok(Observed::HandsOff);
        }
        let ns = msm.namespace().unwrap_or_default();
        let listing = allocation::teardown_query_of(ctx, &ns, cluster.as_deref()).await?;
        let named = allocation::named_machine(msm.spec.provider_id.as_deref(), None);
        let marks = identity(msm);
        let metal = ctx.metal_in(&ns, cluster.as_deref()).await?;
        let owned = allocation::owned(ctx, &metal, &marks, listing.as_ref(), named.as_deref());
        let owned = owned.await?;
        if owned.is_empty() {
            return Ok(Observed::Deleting(Some(owned)));
        }
        // A retired machine stays allocated: its cluster frees it, or the orphan sweep once an
        // operator took it off the record.
        let retired = retired_of(ctx, &ns, cluster.as_deref()).await?;
        let owned = owned.into_iter().filter(|id| !retired.contains(id));
        return Ok(Observed::Deleting(Some(owned.collect())));
    }
    let now = jiff::Timestamp::now();
    let live = Live {
        now,
        gate: gate(msm, ctx, now).await?,
    };
    Ok(Observed::Live(Box::new(live)))
}

/// The MachineSet `name`, while it is still creating replicas: when it last created one.
async fn machine_set_pace(ctx: &Context, ns: &str, name: &str) -> Result<Option<MachineSetPace>> {
    let wait = ctx.settings.machine_set_wait;
    if wait.is_zero() {
        return Ok(None);
    }
    let Some(set) = ctx.get::<MachineSet>(ns, name).await? else {
        return Ok(None);
    };
    if !set.creating() {
        return Ok(None);
    }
    let created = ctx
        .pick(ns, |m: &CapiMachine| set.replica_created(m))
        .await?;
    let newest = created.into_iter().max();
    Ok(Some(MachineSetPace { newest, wait }))
}

/// The gates, in order: reads each one's facts and stops at the first that is closed.
async fn gate(msm: &MetalStackMachine, ctx: &Context, now: jiff::Timestamp) -> Result<MachineGate> {
    let ns = msm.namespace().unwrap_or_default();
    let Some(owner) = capi_owner(msm, "Machine") else {
        return Ok(MachineGate::NoOwner);
    };
    let Some(machine) = ctx.get::<CapiMachine>(&ns, &owner).await? else {
        return Ok(MachineGate::NoMachine);
    };
    let Some(cluster) = ctx
        .get::<Cluster>(&ns, &cluster_name(msm, &machine))
        .await?
    else {
        return Ok(MachineGate::NoCluster { machine });
    };
    if let Some(reason) = paused_reason(msm, Some(&cluster)) {
        return Ok(MachineGate::Paused(reason));
    }
    // A replica capms has taken up (its finalizer, written with its machine's name) never
    // waits for its MachineSet again.
    let held = match capi_owner(&machine, "MachineSet") {
        Some(set) if !has_finalizer(msm, FINALIZER) => machine_set_pace(ctx, &ns, &set)
            .await?
            .and_then(|pace| pace.hold(msm, now)),
        _ => None,
    };
    // A held replica that cannot be allocated yet waits unwritten.
    let closed = |gate: MachineGate| match held {
        Some(left) => MachineGate::HeldByMachineSet { left },
        None => gate,
    };
    let msc = match cluster.metal_stack_cluster() {
        Some(name) => ctx.get::<MetalStackCluster>(&ns, name).await?,
        None => None,
    };
    let Some((msc, network)) = msc.and_then(|msc| {
        let network = provisioned_network(&msc)?.to_owned();
        Some((msc, network))
    }) else {
        return Ok(closed(MachineGate::NoInfrastructure { machine }));
    };
    let Some(secret) = machine.spec.bootstrap.data_secret_name.clone() else {
        return Ok(closed(MachineGate::NoBootstrapSecret { machine }));
    };
    let ready = msm.status.as_ref().is_some_and(|s| s.ready);
    let listing = allocation::query(ctx, &msc, ready);
    let found = match Target::of(msm.spec.provider_id.as_deref(), &partition(msm, &msc), None) {
        Ok(target) => {
            let metal = ctx.metal_of(&msc).await?;
            let marks = identity(msm);
            allocation::lookup(ctx, &metal, &marks, &target, ROLE_MACHINE, &listing).await?
        }
        // decide names the malformed field; nothing to look up.
        Err(_) => Found::Nothing,
    };
    // The bootstrap data is read only to allocate.
    let user_data = match found {
        Found::Nothing => bootstrap_data(ctx, &ns, &secret).await?,
        _ => None,
    };
    let handoff = handoff(msm, ctx, &machine, &found, held.is_some());
    let rack_candidates = match (&found, &machine.spec.failure_domain) {
        (Found::Nothing, Some(_)) if msm.spec.provider_id.is_none() => {
            Some(rack_candidates(msm, ctx, &msc).await?)
        }
        _ => None,
    };
    Ok(MachineGate::Open(Box::new(MachineInputs {
        machine,
        msc,
        network,
        found,
        user_data,
        rack_candidates,
        held,
        handoff,
    })))
}

/// The object's place in the handoff window, asked for only when this reconcile may report its
/// machine provisioned for the first time: capms's machine has phoned home, the object does not
/// say ready yet, its MachineSet no longer holds it and Cluster API has not taken it up.
fn handoff(
    msm: &MetalStackMachine,
    ctx: &Context,
    machine: &CapiMachine,
    found: &Found,
    held: bool,
) -> Handoff {
    let phoned_home = matches!(found, Found::Ours(m) if m.health() == MachineHealth::Ready);
    let ready = msm.status.as_ref().is_some_and(|s| s.ready);
    if !phoned_home || ready || held || machine.spec.provider_id.is_some() {
        return Handoff::Admitted;
    }
    let ns = msm.namespace().unwrap_or_default();
    let key = ObjectRef::new(&msm.name_any()).within(&ns);
    let machine = ObjectRef::new(&machine.name_any()).within(&ns);
    ctx.handoffs.admit(&key, &machine, Instant::now())
}

/// The machines of the object's size in `partition`, as metal-api has them now: the one capms
/// picks in the Machine's rack must be free at this moment, not at the catalog's last refresh.
async fn rack_candidates(
    msm: &MetalStackMachine,
    ctx: &Context,
    msc: &MetalStackCluster,
) -> Result<RackCandidates> {
    let metal = ctx.metal_of(msc).await?;
    if metal.is_v2() {
        return Ok(RackCandidates::ProjectToken);
    }
    let query = MachineFindRequest {
        partition_id: Some(partition(msm, msc)),
        sizeid: Some(msm.spec.machine_type.clone()),
        ..Default::default()
    };
    let machines = metal.machine_find_as::<MachineSummary>(&query).await?;
    Ok(RackCandidates::Machines(machines))
}

/// The bootstrap Secret's `value`, if it has one.
async fn bootstrap_data(ctx: &Context, ns: &str, secret: &str) -> Result<Option<String>> {
    let secret = ctx
        .api::<Secret>(ns)
        .get_opt(secret)
        .await
        .during(|| format!("reading the bootstrap Secret {ns}/{secret}"))?;
    Ok(secret.and_then(|s| s.data).and_then(|d| {
        d.get("value")
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    }))
}
