//! MetalStackFirewall: a firewall machine in metal-api, ready once it has phoned home.

use super::cluster::CLUSTER_ID_KEY;
use super::context::*;
use super::machine::{Health, allocation_of, free_owned_machines, health_of};
use crate::api::common::ProviderId;
use crate::api::{MetalStackCluster, MetalStackFirewall, MetalStackFirewallStatus, Protocol};
use crate::capi::{CLUSTER_NAME_LABEL, Cluster};
use crate::metal::types::*;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use std::sync::Arc;
use std::time::Duration;

pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/firewall";

/// The MetalStackCluster a firewall belongs to: its controller owner, else the cluster named by
/// its cluster-name label (the seed's standalone form).
async fn owning_cluster(
    fw: &MetalStackFirewall,
    ctx: &Context,
) -> Result<Option<(MetalStackCluster, Option<Cluster>)>> {
    let ns = fw.namespace().unwrap_or_default();
    let msc_api = ctx.api::<MetalStackCluster>(&ns);
    let owner = fw
        .owner_references()
        .iter()
        .find(|o| o.kind == "MetalStackCluster" && o.controller == Some(true));
    let msc = match owner {
        Some(o) => msc_api.get_opt(&o.name).await?,
        None => match fw.labels().get(CLUSTER_NAME_LABEL) {
            Some(cluster_name) => match ctx.api::<Cluster>(&ns).get_opt(cluster_name).await? {
                Some(c) => match c.metal_stack_cluster() {
                    Some(name) => msc_api.get_opt(name).await?,
                    None => None,
                },
                None => None,
            },
            None => None,
        },
    };
    let Some(msc) = msc else { return Ok(None) };
    let cluster = match capi_owner(&msc, "Cluster") {
        Some(name) => ctx.api::<Cluster>(&ns).get_opt(&name).await?,
        None => None,
    };
    Ok(Some((msc, cluster)))
}

fn marks(fw: &MetalStackFirewall) -> std::collections::BTreeMap<String, String> {
    owner_marks_of(OwnerKind::Firewall, fw)
}

pub async fn reconcile(fw: Arc<MetalStackFirewall>, ctx: Arc<Context>) -> Result<Action> {
    if is_externally_managed(fw.as_ref()) {
        return Ok(Action::await_change());
    }
    let ns = fw.namespace().unwrap_or_default();
    let api = ctx.api::<MetalStackFirewall>(&ns);
    let generation = fw.metadata.generation;
    let mut status = fw.status.clone().unwrap_or_default();
    let key = fw.uid().unwrap_or_default();

    if fw.metadata.deletion_timestamp.is_some() {
        if fw.finalizers().iter().any(|f| f == FINALIZER) {
            status.ready = false;
            set_condition(
                &mut status.conditions,
                "Ready",
                false,
                "Deleting",
                "freeing the firewall machine",
                generation,
            );
            apply_status(&api, fw.as_ref(), &status).await?;
            free_owned_machines(
                &ctx,
                fw.as_ref(),
                &marks(&fw),
                status.machine_id.clone(),
                "Firewall",
            )
            .await?;
            remove_finalizer(&api, fw.as_ref(), FINALIZER).await?;
        }
        return Ok(Action::await_change());
    }
    let Some((msc, cluster)) = owning_cluster(&fw, &ctx).await? else {
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "WaitingForCluster",
            "waiting for the MetalStackCluster this firewall belongs to (owner reference or cluster-name label)",
            generation,
        );
        apply_status(&api, fw.as_ref(), &status).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    if record_pause(
        &mut status.conditions,
        fw.as_ref(),
        cluster.as_ref(),
        generation,
    ) {
        apply_status(&api, fw.as_ref(), &status).await?;
        return Ok(Action::await_change());
    }
    let Some(network_id) = super::cluster::private_network(&msc, &ctx).await? else {
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "WaitingForNetwork",
            format!(
                "waiting for MetalStackCluster {} to have its private network",
                msc.name_any()
            ),
            generation,
        );
        apply_status(&api, fw.as_ref(), &status).await?;
        return Ok(Action::requeue(ctx.next_poll(&key)));
    };
    if ensure_finalizer(&api, fw.as_ref(), FINALIZER).await? {
        return Ok(Action::await_change());
    }

    let result = ensure_allocated(&fw, &msc, &network_id, &ctx, &mut status).await;
    let action = match result {
        Ok(machine) => {
            // Name the machine in spec.providerID, as MetalStackMachines do (a preset one is kept).
            if fw.spec.provider_id.is_none() {
                let provider_id = ProviderId::format(&msc.spec.partition, &machine.id);
                let patch = serde_json::json!({"spec": {"providerID": provider_id}});
                api.patch(
                    &fw.name_any(),
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await?;
            }
            let health = health_of(&machine);
            let (healthy, reason, message) = health.condition();
            set_condition(
                &mut status.conditions,
                "FirewallHealthy",
                healthy,
                reason,
                message.clone(),
                generation,
            );
            status.ready = health == Health::Ready;
            if status.ready {
                ctx.reset_poll(&key);
                set_condition(
                    &mut status.conditions,
                    "Ready",
                    true,
                    "PhonedHome",
                    format!("firewall {} has phoned home", machine.id),
                    generation,
                );
                Action::requeue(Duration::from_secs(300))
            } else {
                set_condition(
                    &mut status.conditions,
                    "Ready",
                    false,
                    reason,
                    message,
                    generation,
                );
                Action::requeue(ctx.next_poll(&key))
            }
        }
        Err(e) => {
            status.ready = false;
            set_condition(
                &mut status.conditions,
                "FirewallAllocated",
                false,
                e.category().reason(),
                e.to_string(),
                generation,
            );
            set_condition(
                &mut status.conditions,
                "Ready",
                false,
                e.category().reason(),
                e.to_string(),
                generation,
            );
            apply_status(&api, fw.as_ref(), &status).await?;
            return Err(e);
        }
    };
    apply_status(&api, fw.as_ref(), &status).await?;
    Ok(action)
}

/// Finds the firewall capms allocated before (by owner tags) or allocates it.
async fn ensure_allocated(
    fw: &MetalStackFirewall,
    msc: &MetalStackCluster,
    network_id: &str,
    ctx: &Context,
    status: &mut MetalStackFirewallStatus,
) -> Result<Machine> {
    let marks = marks(fw);
    let preset = match &fw.spec.provider_id {
        Some(p) => Some(ProviderId::parse_spec(p).map_err(Error::Invalid)?),
        None => None,
    };
    let find = MachineFindRequest {
        tags: owner_tags(&marks),
        allocation_role: Some(ROLE_FIREWALL.into()),
        ..Default::default()
    };
    if let Some(existing) = allocation_of(
        ctx,
        &marks,
        status.machine_id.as_deref(),
        preset.as_ref(),
        &find,
        "spec.providerID",
    )
    .await?
    {
        status.machine_id = Some(existing.id.clone());
        set_condition(
            &mut status.conditions,
            "FirewallAllocated",
            true,
            "Allocated",
            format!("firewall machine {}", existing.id),
            fw.metadata.generation,
        );
        return Ok(existing);
    }
    let ns = fw.namespace().unwrap_or_default();
    let name = fw.name_any();
    let mut tags = owner_tags(&marks);
    tags.push(format!(
        "{CLUSTER_ID_KEY}={}",
        cluster_id(&ns, &msc.name_any())
    ));
    tags.push("firewall.metal-stack.io/managed-by=capms".into());
    let mut networks = vec![
        AllocationNetwork {
            networkid: network_id.to_owned(),
            autoacquire: Some(true),
        },
        AllocationNetwork {
            networkid: msc.spec.public_network_id.clone(),
            autoacquire: Some(true),
        },
    ];
    for extra in &fw.spec.networks {
        if !networks.iter().any(|n| &n.networkid == extra) {
            networks.push(AllocationNetwork {
                networkid: extra.clone(),
                autoacquire: Some(true),
            });
        }
    }
    let proto = |p: Option<Protocol>| match p.unwrap_or_default() {
        Protocol::Tcp => "tcp".to_owned(),
        Protocol::Udp => "udp".to_owned(),
    };
    let rules = fw.spec.rules.as_ref().map(|r| FirewallRules {
        egress: r
            .egress
            .iter()
            .map(|e| FirewallEgressRule {
                protocol: proto(e.protocol),
                ports: e.ports.clone(),
                to: e.to.clone(),
                comment: e.comment.clone().unwrap_or_default(),
            })
            .collect(),
        ingress: r
            .ingress
            .iter()
            .map(|i| FirewallIngressRule {
                protocol: proto(i.protocol),
                ports: i.ports.clone(),
                from: i.from.clone(),
                to: i.to.clone(),
                comment: i.comment.clone().unwrap_or_default(),
            })
            .collect(),
    });
    let req = FirewallCreateRequest {
        machine: MachineAllocateRequest {
            uuid: preset.map(|p| p.machine_id),
            name: name.clone(),
            description: format!(
                "firewall of cluster {ns}/{}, allocated by capms",
                msc.name_any()
            ),
            hostname: name.clone(),
            projectid: msc.spec.project_id.clone(),
            partitionid: msc.spec.partition.clone(),
            sizeid: fw.spec.machine_type.clone(),
            imageid: fw.spec.image.clone(),
            networks: Some(networks),
            ssh_pub_keys: fw.spec.ssh_keys.clone(),
            tags,
            ..Default::default()
        },
        firewall_rules: rules,
    };
    let machine = match ctx.metal.firewall_allocate(&req).await {
        Ok(m) => m,
        Err(e) => {
            ctx.event(
                fw,
                true,
                "FirewallAllocationFailed",
                "AllocateFirewall",
                e.to_string(),
            )
            .await;
            return Err(e.into());
        }
    };
    ctx.event(
        fw,
        false,
        "FirewallAllocated",
        "AllocateFirewall",
        format!("allocated firewall machine {}", machine.id),
    )
    .await;
    status.machine_id = Some(machine.id.clone());
    set_condition(
        &mut status.conditions,
        "FirewallAllocated",
        true,
        "Allocated",
        format!("firewall machine {}", machine.id),
        fw.metadata.generation,
    );
    Ok(machine)
}
