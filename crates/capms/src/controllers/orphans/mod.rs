//! The orphan sweep: what capms allocated in metal-api for an object that is gone without it
//! being freed (a leak, however it came about) is found and freed.
//!
//! Every `--orphan-sweep-interval` the elected capms looks at each cluster it manages: each
//! Cluster API Cluster of a MetalStackCluster in its namespaces that is neither paused nor being
//! deleted by clusterctl move. It asks metal-api for the machines, firewalls, IPs and networks
//! carrying the cluster's tag whose owner marks say capms allocated them (the owner's uid mark,
//! which only capms writes: what metal-stack's Go provider allocated is never touched). One whose
//! owner (the MetalStackMachine, MetalStackFirewall or MetalStackCluster its marks name) the
//! watch caches have not held for `--orphan-grace`, look after look, and the apiserver confirms
//! gone, is freed, and reported with an event on the Cluster (`OrphanFreed`) and in
//! `capms_orphans_freed_total`; `capms_orphan_sweeps_total` counts the looks.
//!
//! Each cluster is looked at with its own metal-api credentials (spec.credentialsRef).
//!
//! A machine its MetalStackCluster records as retired (a remediation's `onExhaustion: Retire`)
//! is not an orphan: it is freed once an operator deleted its record.
//!
//! What keeps it safe: a cluster capms does not manage (not in its namespaces, its Cluster gone
//! or moved away) is not looked at; a paused cluster, and the source of a clusterctl move
//! (paused, then deleted with clusterctl's annotation), are left alone, and the target of one
//! is paused until everything is there; a restore that brings objects back one after another
//! is done within the grace period (their allocations are found by name, and the wait starts
//! over whenever the owner is seen).

mod decide;

pub use decide::SweepStep;
use decide::{Candidate, Orphans, Owner, SweepView};

use crate::api::{MetalStackCluster, MetalStackFirewall, MetalStackMachine};
use crate::capi::{Cluster, DELETE_FOR_MOVE_ANNOTATION};
use crate::ownership::{
    CLUSTER_ID, OwnerKind, allocated_by_capms, cluster_id, identity, retired_machines,
};
use crate::reconciler::crash_points;
use crate::reconciler::gates::paused_reason;
use crate::reconciler::{Context, Result};
use kube::ResourceExt;
use metal_api::types::{IpFindRequest, MachineFindRequest, NetworkFindRequest};
use std::time::{Duration, Instant};

/// Sweeps every `interval` (after a first look at once) until `shutdown`, freeing what has been
/// orphaned for `grace`. Never returns an error: a failed look is logged and tried again.
pub async fn run(
    ctx: &Context,
    (interval, grace): (Duration, Duration),
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut orphans = Orphans::default();
    let sweeping = async {
        loop {
            if let Err(e) = sweep(ctx, &mut orphans, grace).await {
                tracing::warn!(error = %e, "orphan sweep failed; looking again at the next sweep");
            }
            tokio::time::sleep(interval).await;
        }
    };
    tokio::select! {
        () = sweeping => {}
        () = shutdown => {}
    }
}

/// One look, and the frees it decides.
async fn sweep(ctx: &Context, orphans: &mut Orphans, grace: Duration) -> Result<()> {
    let _turn = crash_points::one_at_a_time().await;
    let observed = crash_points::within(|| "OrphanSweep observe".into(), observe(ctx)).await?;
    for orphan in orphans.decide(&observed, Instant::now(), grace) {
        if still_there(ctx, &orphan.owner).await? {
            continue;
        }
        let step: &'static str = (&orphan.step).into();
        crash_points::within(|| format!("OrphanSweep {step}"), free(ctx, &orphan)).await?;
        orphans.freed(&orphan.step);
    }
    ctx.metrics.orphan_sweep();
    Ok(())
}

/// The allocations of every cluster capms manages and hands on, and which of their owners the
/// caches hold.
async fn observe(ctx: &Context) -> Result<SweepView> {
    let mut observed = SweepView::default();
    for cluster in managed(ctx) {
        let Some(infrastructure) = cluster.metal_stack_cluster() else {
            continue;
        };
        let ns = cluster.namespace().unwrap_or_default();
        let msc = ctx.get::<MetalStackCluster>(&ns, infrastructure).await?;
        let msc_moving = msc.as_ref().is_some_and(|m| {
            paused_reason(m, Some(&cluster)).is_some()
                || m.annotations().contains_key(DELETE_FOR_MOVE_ANNOTATION)
        });
        if msc_moving {
            continue;
        }
        let name = format!("{ns}/{}", cluster.name_any());
        let id = cluster_id(&ns, infrastructure);
        // Retired machines stay allocated until an operator takes them off the record.
        let retired = msc.as_ref().map(retired_machines).unwrap_or_default();
        // One cluster's unusable credentials (or metal-api) keep no other cluster unswept.
        let found = match allocations(ctx, msc.as_ref(), &ns, &id, &name).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "orphan sweep could not look at the cluster; looking again at the next sweep");
                continue;
            }
        };
        observed.candidates.extend(found.into_iter().filter(
            |c| !matches!(&c.step, SweepStep::FreeMachine(machine) if retired.contains(machine)),
        ));
    }
    for candidate in &observed.candidates {
        if cached(ctx, &candidate.owner).await? {
            observed.present.insert(candidate.owner.clone());
        }
    }
    Ok(observed)
}

/// The Clusters capms manages and keeps its hands on: of a MetalStackCluster, in its namespaces
/// (the watch caches hold no others), not paused, not deleted by clusterctl move.
fn managed(ctx: &Context) -> Vec<Cluster> {
    let Some(stores) = ctx.caches.get() else {
        return Vec::new();
    };
    stores
        .clusters
        .state()
        .iter()
        .filter(|c| c.metal_stack_cluster().is_some() && !c.is_paused())
        .filter(|c| !c.annotations().contains_key(DELETE_FOR_MOVE_ANNOTATION))
        .map(|c| (**c).clone())
        .collect()
}

/// What metal-api holds with the cluster tag `<ns>.<msc>` that capms allocated in `namespace`,
/// asked with the cluster's credentials.
async fn allocations(
    ctx: &Context,
    msc: Option<&MetalStackCluster>,
    namespace: &str,
    id: &str,
    cluster: &str,
) -> Result<Vec<Candidate>> {
    let metal = ctx.metal_for(msc).await?;
    let tag = format!("{CLUSTER_ID}={id}");
    let mut found = Vec::new();
    let machines = MachineFindRequest {
        tags: vec![tag.clone()],
        ..Default::default()
    };
    let machines = metal.machine_find_as::<metal_api::MachineSummary>(&machines);
    for m in machines.await? {
        if m.allocation.is_some() {
            found.push((SweepStep::FreeMachine(m.id), m.tags));
        }
    }
    let ips = IpFindRequest {
        tags: vec![tag],
        ..Default::default()
    };
    for ip in metal.ip_find(&ips).await? {
        found.push((SweepStep::FreeIp(ip.ipaddress), ip.tags));
    }
    let networks = NetworkFindRequest {
        labels: Some([(CLUSTER_ID.to_owned(), id.to_owned())].into()),
        ..Default::default()
    };
    for n in metal.network_find(&networks).await? {
        let labels = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        found.push((SweepStep::FreeNetwork(n.id), labels));
    }
    Ok(found
        .into_iter()
        .filter_map(|(step, marks)| {
            let (kind, ns, name) = allocated_by_capms(&marks)?;
            let owner = Owner {
                kind,
                namespace: ns,
                name,
            };
            (owner.namespace == namespace).then(|| Candidate {
                step,
                owner,
                cluster: cluster.to_owned(),
            })
        })
        .collect())
}

/// Does the watch cache hold `owner`?
async fn cached(ctx: &Context, owner: &Owner) -> Result<bool> {
    let (ns, name) = (&owner.namespace, &owner.name);
    Ok(match owner.kind {
        OwnerKind::Machine => ctx.get::<MetalStackMachine>(ns, name).await?.is_some(),
        OwnerKind::Firewall => ctx.get::<MetalStackFirewall>(ns, name).await?.is_some(),
        OwnerKind::Cluster => ctx.get::<MetalStackCluster>(ns, name).await?.is_some(),
    })
}

/// Does the apiserver have `owner` (the caches may lag behind it)?
async fn still_there(ctx: &Context, owner: &Owner) -> Result<bool> {
    match owner.kind {
        OwnerKind::Machine => held::<MetalStackMachine>(ctx, owner).await,
        OwnerKind::Firewall => held::<MetalStackFirewall>(ctx, owner).await,
        OwnerKind::Cluster => held::<MetalStackCluster>(ctx, owner).await,
    }
}

async fn held<K>(ctx: &Context, owner: &Owner) -> Result<bool>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    use crate::reconciler::During;
    let (ns, name) = (owner.namespace.as_str(), owner.name.as_str());
    let during = || format!("reading the owner {:?} {ns}/{name}", owner.kind);
    Ok(ctx
        .api::<K>(ns)
        .get_opt(name)
        .await
        .during(during)?
        .is_some())
}

/// Frees an orphan and says so: an event on its Cluster, the metric, a warning in the log.
async fn free(ctx: &Context, orphan: &Candidate) -> Result<()> {
    let owner = &orphan.owner;
    let (ns, cluster) = orphan.cluster.split_once('/').unwrap_or_default();
    let metal = ctx.metal_in(ns, Some(cluster)).await?;
    let (label, what) = match &orphan.step {
        SweepStep::FreeMachine(id) => {
            let marks = identity(owner.kind, &owner.namespace, &owner.name);
            if !super::allocation::release(ctx, &metal, &marks, id).await? {
                return Ok(());
            }
            let firewall = owner.kind == OwnerKind::Firewall;
            let label = if firewall { "firewall" } else { "machine" };
            (label, format!("{label} {id}"))
        }
        SweepStep::FreeIp(address) => {
            metal.ip_free(address).await?;
            ("ip", format!("IP {address}"))
        }
        SweepStep::FreeNetwork(id) => {
            metal.network_free(id).await?;
            ("network", format!("network {id}"))
        }
    };
    let note = format!(
        "freed {what}, allocated by capms for {:?} {}/{}, which has been gone for the grace period",
        owner.kind, owner.namespace, owner.name
    );
    tracing::warn!(cluster = %orphan.cluster, "{note}");
    let step: &'static str = (&orphan.step).into();
    ctx.metrics.orphan_freed(label);
    if let Some((ns, name)) = orphan.cluster.split_once('/')
        && let Some(cluster) = ctx.get::<Cluster>(ns, name).await?
    {
        ctx.events.warn(&cluster, "OrphanFreed", step, note);
    }
    Ok(())
}
