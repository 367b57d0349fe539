//! MetalStackMachine: a metal-stack machine with the bootstrap data of its Machine.

use super::cluster::CLUSTER_ID_KEY;
use super::context::*;
use crate::api::common::ProviderId;
use crate::api::{
    Initialization, MachineAddress, MachineAddressType, MetalStackCluster, MetalStackMachine,
    MetalStackMachineStatus,
};
use crate::capi::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, Cluster, Machine as CapiMachine};
use crate::metal::types::*;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/machine";
/// Labels capms puts on a MetalStackMachine once it has a machine: where it stands.
pub const RACK_LABEL: &str = "machine.metal-stack.io/rack";
pub const ASN_LABEL: &str = "machine.metal-stack.io/network.primary.asn";
const PURPOSE: &str = "metal-stack.infrastructure.cluster.x-k8s.io/purpose";

/// How far a metal-stack machine is, read from its event log and liveliness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Ready,
    Provisioning(String),
    CrashLoop,
    FailedReclaim,
    NotAlive(String),
}

impl Health {
    /// (healthy, reason, message) for a condition.
    pub fn condition(&self) -> (bool, &'static str, String) {
        match self {
            Health::Ready => (true, "PhonedHome", "the machine has phoned home and is alive".into()),
            Health::Provisioning(event) => (true, "Provisioning", format!("provisioning; last event: {event}")),
            Health::CrashLoop => (false, "CrashLoop", "the machine is in a crash loop (it PXE-boots again instead of phoning home); check its console in metal-stack".into()),
            Health::FailedReclaim => (false, "FailedReclaim", "the machine phoned home after it was freed: its reclaim failed; an operator must reinstall it".into()),
            Health::NotAlive(l) => (false, "NotAlive", format!("the machine phoned home but its liveliness is {l}")),
        }
    }
}

pub fn health_of(m: &Machine) -> Health {
    if m.events.crash_loop {
        return Health::CrashLoop;
    }
    if m.events.failed_machine_reclaim {
        return Health::FailedReclaim;
    }
    match m.last_event() {
        Some(event::PHONED_HOME) if m.liveliness == liveliness::ALIVE => Health::Ready,
        Some(event::PHONED_HOME) => Health::NotAlive(m.liveliness.clone()),
        other => Health::Provisioning(other.unwrap_or("none").to_owned()),
    }
}

/// The machine capms already allocated for an object: the recorded one, the preset one, or the
/// one its owner tags find. None when nothing is allocated yet. A preset machine allocated to
/// someone else is an error naming `field`.
pub async fn allocation_of(
    ctx: &Context,
    marks: &BTreeMap<String, String>,
    recorded: Option<&str>,
    preset: Option<&ProviderId>,
    find: &MachineFindRequest,
    field: &str,
) -> Result<Option<Machine>> {
    if let Some(id) = recorded {
        match ctx.metal.machine(id).await {
            Ok(m) if m.allocation.is_some() && has_owner_tags(&m.tags, marks) => {
                return Ok(Some(m));
            }
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(p) = preset {
        let m = ctx.metal.machine(&p.machine_id).await.map_err(|e| {
            if e.is_not_found() {
                Error::Invalid(format!(
                    "{field}: machine {} does not exist in metal-api",
                    p.machine_id
                ))
            } else {
                e.into()
            }
        })?;
        return match &m.allocation {
            Some(_) if has_owner_tags(&m.tags, marks) => Ok(Some(m)),
            Some(a) => Err(Error::Invalid(format!(
                "{field}: machine {} is already allocated to {:?} in project {}",
                m.id, a.name, a.project
            ))),
            None => Ok(None),
        };
    }
    Ok(ctx
        .metal
        .machine_find(find)
        .await?
        .into_iter()
        .find(|m| m.allocation.is_some()))
}

fn marks(msm: &MetalStackMachine) -> BTreeMap<String, String> {
    owner_marks_of(OwnerKind::Machine, msm)
}

/// Addresses as Cluster API shows them: InternalIP from the private networks, ExternalIP from
/// external ones, the hostname as Hostname and InternalDNS.
pub fn addresses_of(m: &Machine) -> Vec<MachineAddress> {
    let Some(a) = &m.allocation else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut push = |type_, address: &str| {
        out.push(MachineAddress {
            type_,
            address: address.to_owned(),
        })
    };
    let mut private: Vec<_> = a
        .networks
        .iter()
        .filter(|n| n.networktype.starts_with("private"))
        .collect();
    private.sort_by_key(|n| {
        n.networktype != machine_network_type::PRIVATE_PRIMARY_UNSHARED
            && n.networktype != machine_network_type::PRIVATE_PRIMARY_SHARED
    });
    for n in private {
        n.ips
            .iter()
            .for_each(|ip| push(MachineAddressType::InternalIp, ip));
    }
    for n in a
        .networks
        .iter()
        .filter(|n| n.networktype == machine_network_type::EXTERNAL)
    {
        n.ips
            .iter()
            .for_each(|ip| push(MachineAddressType::ExternalIp, ip));
    }
    if !a.hostname.is_empty() {
        push(MachineAddressType::Hostname, &a.hostname);
        push(MachineAddressType::InternalDns, &a.hostname);
    }
    out
}

pub async fn reconcile(msm: Arc<MetalStackMachine>, ctx: Arc<Context>) -> Result<Action> {
    if is_externally_managed(msm.as_ref()) {
        return Ok(Action::await_change());
    }
    let ns = msm.namespace().unwrap_or_default();
    let api = ctx.api::<MetalStackMachine>(&ns);
    let generation = msm.metadata.generation;
    let mut status = msm.status.clone().unwrap_or_default();
    let key = msm.uid().unwrap_or_default();
    let waiting = |status: &mut MetalStackMachineStatus, reason: &str, message: String| {
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            reason,
            message,
            generation,
        );
    };

    if msm.metadata.deletion_timestamp.is_some() {
        if msm.finalizers().iter().any(|f| f == FINALIZER) {
            status.ready = false;
            status.initialization = None;
            waiting(&mut status, "Deleting", "freeing the machine".into());
            apply_status(&api, msm.as_ref(), &status).await?;
            let recorded = msm
                .spec
                .provider_id
                .as_deref()
                .and_then(ProviderId::parse)
                .map(|p| p.machine_id);
            free_owned_machines(&ctx, msm.as_ref(), &marks(&msm), recorded, "Machine").await?;
            remove_finalizer(&api, msm.as_ref(), FINALIZER).await?;
        }
        return Ok(Action::await_change());
    }
    let Some(machine_name) = capi_owner(msm.as_ref(), "Machine") else {
        waiting(
            &mut status,
            "WaitingForMachineOwnerRef",
            "waiting for Cluster API to set the owning Machine".into(),
        );
        apply_status(&api, msm.as_ref(), &status).await?;
        return Ok(Action::await_change());
    };
    let Some(machine) = ctx.api::<CapiMachine>(&ns).get_opt(&machine_name).await? else {
        waiting(
            &mut status,
            "WaitingForMachine",
            format!("Machine {ns}/{machine_name} does not exist (yet)"),
        );
        apply_status(&api, msm.as_ref(), &status).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    let cluster_name = msm
        .labels()
        .get(CLUSTER_NAME_LABEL)
        .cloned()
        .unwrap_or_else(|| machine.spec.cluster_name.clone());
    let cluster = ctx.api::<Cluster>(&ns).get_opt(&cluster_name).await?;
    let Some(cluster) = cluster else {
        waiting(
            &mut status,
            "WaitingForCluster",
            format!("Cluster {ns}/{cluster_name} does not exist (yet)"),
        );
        apply_status(&api, msm.as_ref(), &status).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    if record_pause(
        &mut status.conditions,
        msm.as_ref(),
        Some(&cluster),
        generation,
    ) {
        apply_status(&api, msm.as_ref(), &status).await?;
        return Ok(Action::await_change());
    }
    if ensure_finalizer(&api, msm.as_ref(), FINALIZER).await? {
        return Ok(Action::await_change());
    }

    // Gates: the cluster's infrastructure, then the bootstrap data.
    let msc = match cluster.metal_stack_cluster() {
        Some(name) => ctx.api::<MetalStackCluster>(&ns).get_opt(name).await?,
        None => None,
    };
    let network = msc
        .as_ref()
        .and_then(|c| c.status.as_ref())
        .filter(|s| s.initialization.as_ref().and_then(|i| i.provisioned) == Some(true))
        .and_then(|s| s.network_id.clone());
    let (Some(msc), Some(network_id)) = (msc, network) else {
        waiting(
            &mut status,
            "WaitingForClusterInfrastructure",
            format!(
                "waiting for the MetalStackCluster of Cluster {cluster_name} to be provisioned"
            ),
        );
        apply_status(&api, msm.as_ref(), &status).await?;
        return Ok(Action::requeue(ctx.next_poll(&key)));
    };
    let Some(secret_name) = machine.spec.bootstrap.data_secret_name.clone() else {
        waiting(
            &mut status,
            "WaitingForBootstrapData",
            format!("waiting for Machine {machine_name} to have spec.bootstrap.dataSecretName"),
        );
        apply_status(&api, msm.as_ref(), &status).await?;
        return Ok(Action::requeue(ctx.next_poll(&key)));
    };
    let user_data = match ctx.api::<Secret>(&ns).get_opt(&secret_name).await? {
        Some(secret) => secret.data.and_then(|d| {
            d.get("value")
                .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        }),
        None => None,
    };
    let Some(user_data) = user_data else {
        waiting(
            &mut status,
            "WaitingForBootstrapData",
            format!("bootstrap Secret {ns}/{secret_name} does not exist or has no key \"value\""),
        );
        apply_status(&api, msm.as_ref(), &status).await?;
        return Ok(Action::requeue(ctx.next_poll(&key)));
    };

    let partition = msm
        .spec
        .partition
        .clone()
        .unwrap_or_else(|| msc.spec.partition.clone());
    let control_plane = machine.labels().contains_key(CONTROL_PLANE_LABEL);
    let plan = AllocationPlan {
        msm: &msm,
        msc: &msc,
        partition: &partition,
        network_id: &network_id,
        user_data,
        control_plane,
    };
    let machine_result = ensure_allocated(&plan, &ctx).await;
    let metal_machine = match machine_result {
        Ok(m) => m,
        Err(e) => {
            let reason = e.category().reason();
            set_condition(
                &mut status.conditions,
                "MachineAllocated",
                false,
                reason,
                e.to_string(),
                generation,
            );
            waiting(&mut status, reason, e.to_string());
            status.ready = false;
            status.initialization = None;
            apply_status(&api, msm.as_ref(), &status).await?;
            return Err(e);
        }
    };
    set_condition(
        &mut status.conditions,
        "MachineAllocated",
        true,
        "Allocated",
        format!("machine {} in partition {partition}", metal_machine.id),
        generation,
    );
    record_machine(&msm, &metal_machine, &partition, &ctx).await?;

    status.addresses = addresses_of(&metal_machine);
    let health = health_of(&metal_machine);
    let (healthy, reason, message) = health.condition();
    set_condition(
        &mut status.conditions,
        "MachineHealthy",
        healthy,
        reason,
        message.clone(),
        generation,
    );
    let action = if health == Health::Ready {
        ctx.reset_poll(&key);
        status.ready = true;
        status.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        set_condition(
            &mut status.conditions,
            "Ready",
            true,
            "PhonedHome",
            format!("machine {} has phoned home", metal_machine.id),
            generation,
        );
        Action::requeue(Duration::from_secs(300))
    } else {
        // A machine once provisioned stays provisioned for Cluster API; health shows in conditions.
        if !status.ready {
            status.initialization = None;
        }
        waiting(&mut status, reason, message);
        Action::requeue(ctx.next_poll(&key))
    };
    apply_status(&api, msm.as_ref(), &status).await?;
    Ok(action)
}

struct AllocationPlan<'a> {
    msm: &'a MetalStackMachine,
    msc: &'a MetalStackCluster,
    partition: &'a str,
    network_id: &'a str,
    user_data: String,
    control_plane: bool,
}

async fn ensure_allocated(plan: &AllocationPlan<'_>, ctx: &Context) -> Result<Machine> {
    let msm = plan.msm;
    let marks = marks(msm);
    let preset = match &msm.spec.provider_id {
        Some(p) => Some(ProviderId::parse_spec(p).map_err(Error::Invalid)?),
        None => None,
    };
    // A providerID capms wrote itself names the machine it allocated: look it up, never preset.
    let written_by_capms = preset.as_ref().is_some_and(|p| {
        msm.spec.provider_id.as_deref() == Some(&ProviderId::format(plan.partition, &p.machine_id))
    });
    let find = MachineFindRequest {
        tags: owner_tags(&marks),
        allocation_role: Some(ROLE_MACHINE.into()),
        ..Default::default()
    };
    let recorded = if written_by_capms {
        preset.as_ref().map(|p| p.machine_id.as_str())
    } else {
        None
    };
    let preset_for_lookup = if written_by_capms {
        None
    } else {
        preset.as_ref()
    };
    if let Some(existing) = allocation_of(
        ctx,
        &marks,
        recorded,
        preset_for_lookup,
        &find,
        "spec.providerID",
    )
    .await?
    {
        return Ok(existing);
    }
    let ns = msm.namespace().unwrap_or_default();
    let name = msm.name_any();
    let cluster_tag = format!("{CLUSTER_ID_KEY}={}", cluster_id(&ns, &plan.msc.name_any()));
    let mut tags = owner_tags(&marks);
    tags.push(cluster_tag.clone());
    tags.push(format!(
        "{PURPOSE}={}",
        if plan.control_plane {
            "control-plane"
        } else {
            "worker"
        }
    ));
    tags.extend(msm.spec.tags.iter().cloned());
    let req = MachineAllocateRequest {
        uuid: preset_for_lookup.map(|p| p.machine_id.clone()),
        name: name.clone(),
        description: format!(
            "{ns}/{name} of cluster {ns}/{}, allocated by capms",
            plan.msc.name_any()
        ),
        hostname: cloud_config_hostname(&plan.user_data).unwrap_or_else(|| name.clone()),
        projectid: plan.msc.spec.project_id.clone(),
        partitionid: plan.partition.to_owned(),
        sizeid: msm.spec.machine_type.clone(),
        imageid: msm.spec.image.clone(),
        networks: Some(vec![AllocationNetwork {
            networkid: plan.network_id.to_owned(),
            autoacquire: Some(true),
        }]),
        ssh_pub_keys: msm.spec.ssh_keys.clone(),
        user_data: plan.user_data.clone(),
        tags,
        // Spread a cluster's control-plane machines over racks.
        placement_tags: if plan.control_plane {
            vec![cluster_tag, format!("{PURPOSE}=control-plane")]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    match ctx.metal.machine_allocate(&req).await {
        Ok(m) => {
            ctx.event(
                msm,
                false,
                "MachineAllocated",
                "AllocateMachine",
                format!("allocated machine {} in partition {}", m.id, plan.partition),
            )
            .await;
            Ok(m)
        }
        Err(e) => {
            ctx.event(
                msm,
                true,
                "MachineAllocationFailed",
                "AllocateMachine",
                e.to_string(),
            )
            .await;
            Err(e.into())
        }
    }
}

/// Writes what identifies the machine into the object: spec.providerID (unless the user preset
/// one, which is kept as written) and the rack and ASN labels. One patch, only when it changes.
async fn record_machine(
    msm: &MetalStackMachine,
    m: &Machine,
    partition: &str,
    ctx: &Context,
) -> Result<()> {
    let mut labels = BTreeMap::new();
    if !m.rackid.is_empty() {
        labels.insert(RACK_LABEL.to_owned(), m.rackid.clone());
    }
    if let Some(asn) = m
        .allocation
        .as_ref()
        .and_then(|a| a.networks.first())
        .map(|n| n.asn)
    {
        labels.insert(ASN_LABEL.to_owned(), asn.to_string());
    }
    let labels_current = labels.iter().all(|(k, v)| msm.labels().get(k) == Some(v));
    let provider_id = msm
        .spec
        .provider_id
        .clone()
        .unwrap_or_else(|| ProviderId::format(partition, &m.id));
    if labels_current && msm.spec.provider_id.as_deref() == Some(provider_id.as_str()) {
        return Ok(());
    }
    let patch =
        serde_json::json!({"metadata": {"labels": labels}, "spec": {"providerID": provider_id}});
    ctx.api::<MetalStackMachine>(&msm.namespace().unwrap_or_default())
        .patch(
            &msm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Frees every metal-stack machine that carries `marks` (found by tag, plus the `recorded`
/// one), and only those: capms never frees a machine it did not allocate for this object.
pub async fn free_owned_machines<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    marks: &BTreeMap<String, String>,
    recorded: Option<String>,
    what: &str,
) -> Result<()> {
    let find = MachineFindRequest {
        tags: owner_tags(marks),
        ..Default::default()
    };
    let mut ids: Vec<String> = ctx
        .metal
        .machine_find(&find)
        .await?
        .into_iter()
        .map(|m| m.id)
        .collect();
    ids.extend(recorded);
    ids.sort();
    ids.dedup();
    for id in ids {
        match ctx.metal.machine(&id).await {
            Ok(m) if m.allocation.is_some() && has_owner_tags(&m.tags, marks) => {
                ctx.metal.machine_free(&id).await?;
                ctx.event(
                    obj,
                    false,
                    &format!("{what}Freed"),
                    &format!("Free{what}"),
                    format!("freed {} {id}", what.to_lowercase()),
                )
                .await;
            }
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The hostname a cloud-config bootstrap gives the machine (its top-level `hostname`), so that
/// metal-api's allocation, and with it the Hostname address, names the machine as the node will
/// call itself. None for other formats, templated values and names that are not a DNS label.
pub fn cloud_config_hostname(user_data: &str) -> Option<String> {
    let body = user_data.trim_start();
    // cloud-init's Jinja header may precede the cloud-config marker.
    let body = body
        .strip_prefix("## template: jinja")
        .map(str::trim_start)
        .unwrap_or(body);
    if !body.starts_with("#cloud-config") {
        return None;
    }
    let config: serde_json::Value = serde_saphyr::from_str(body).ok()?;
    let hostname = config.get("hostname")?.as_str()?;
    let is_label = (1..=63).contains(&hostname.len())
        && hostname
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !hostname.starts_with('-')
        && !hostname.ends_with('-');
    is_label.then(|| hostname.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hostname_comes_from_a_cloud_config_only() {
        let seed = "#cloud-config\nhostname: node-1\n";
        assert_eq!(cloud_config_hostname(seed).as_deref(), Some("node-1"));
        let jinja = "## template: jinja\n#cloud-config\nhostname: cp-0\nruncmd: [true]\n";
        assert_eq!(cloud_config_hostname(jinja).as_deref(), Some("cp-0"));
        for none in [
            "#!/bin/sh\nhostname node-1\n",
            "{\"ignition\": {\"version\": \"3.4.0\"}}",
            "#cloud-config\nruncmd: [true]\n",
            "#cloud-config\nhostname: '{{ ds.meta_data.local_hostname }}'\n",
            "#cloud-config\nhostname: Node_1\n",
            "#cloud-config\nhostname: [not, a, name]\n",
            "#cloud-config\n: broken: yaml\n",
        ] {
            assert_eq!(cloud_config_hostname(none), None, "{none:?}");
        }
    }

    fn machine(last: &str, liveliness: &str) -> Machine {
        let mut m = Machine {
            liveliness: liveliness.into(),
            ..Default::default()
        };
        m.events.log.push(MachineEvent {
            event: last.into(),
            ..Default::default()
        });
        m
    }

    #[test]
    fn health_follows_events_and_liveliness() {
        assert_eq!(
            health_of(&machine(event::PHONED_HOME, "Alive")),
            Health::Ready
        );
        assert_eq!(
            health_of(&machine(event::PHONED_HOME, "Unknown")),
            Health::NotAlive("Unknown".into())
        );
        assert_eq!(
            health_of(&machine(event::INSTALLING, "Alive")),
            Health::Provisioning("Installing".into())
        );
        let mut looping = machine(event::PHONED_HOME, "Alive");
        looping.events.crash_loop = true;
        assert_eq!(health_of(&looping), Health::CrashLoop);
        let mut reclaim = machine(event::PHONED_HOME, "Alive");
        reclaim.events.failed_machine_reclaim = true;
        assert_eq!(health_of(&reclaim), Health::FailedReclaim);
    }

    #[test]
    fn addresses_come_from_the_allocation() {
        let m = Machine {
            allocation: Some(MachineAllocation {
                hostname: "worker-0".into(),
                networks: vec![
                    MachineNetwork {
                        networktype: "external".into(),
                        ips: vec!["127.100.0.7".into()],
                        ..Default::default()
                    },
                    MachineNetwork {
                        networktype: "privateprimaryunshared".into(),
                        ips: vec!["127.16.0.1".into()],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        let got: Vec<_> = addresses_of(&m)
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        assert_eq!(
            got,
            [
                (MachineAddressType::InternalIp, "127.16.0.1".into()),
                (MachineAddressType::ExternalIp, "127.100.0.7".into()),
                (MachineAddressType::Hostname, "worker-0".into()),
                (MachineAddressType::InternalDns, "worker-0".into()),
            ]
        );
        assert!(addresses_of(&Machine::default()).is_empty());
    }
}
