//! Machines and firewalls through v2, in metal-api's model. A machine is found by its labels
//! and its allocation's together (v1 allocations carry their tags as the machine's labels, v2
//! ones as the allocation's), so a cluster whose credentials move from v1 to v2 keeps its
//! machines. Ready is v2's `PHONED_HOME` event; v1's `succeeded` is read from it.

use super::networks::{nat_type, network_type};
use super::{Backend, Failure, Result, carries, labels_of, tags_of};
use crate::types::{
    FirewallEgressRule, FirewallIngressRule, FirewallRules, Machine, MachineAllocateRequest,
    MachineAllocation, MachineEvent, MachineEvents, MachineFindRequest, MachineNetwork, Partition,
    PowerAction, ROLE_FIREWALL, ROLE_MACHINE, Size, machine_network_type,
};
use base64::Engine;
use metalstack_api::types::machine::{
    self as v2, FirewallSpec, IPProtocol, MachineAllocationNetwork, MachineAllocationType,
    MachineBMCCommand, MachineLiveliness, MachineProvisioningEventState,
    MachineProvisioningEventType as Event, MachineQuery, MachineServiceCreateRequest,
    MachineServiceListRequest,
};
use metalstack_api::types::network::NetworkType;
use metalstack_api::types::{Labels, Meta};
use std::sync::Arc;
use std::time::Duration;

/// How long a free waits for v2's Delete, which answers once the machine is freed (minutes on
/// real machines): longer, the free goes on without holding its caller.
const FREE_WAIT: Duration = Duration::from_secs(5);

/// An event as v1 names it.
fn event_name(e: Event) -> &'static str {
    use crate::types::event;
    match e {
        Event::Alive => "Alive",
        Event::Crashed => "Crashed",
        Event::PxeBooting => event::PXE_BOOTING,
        Event::PlannedReboot => event::PLANNED_REBOOT,
        Event::Preparing => event::PREPARING,
        Event::Registering => event::REGISTERING,
        Event::Waiting => event::WAITING,
        Event::Installing => event::INSTALLING,
        Event::BootingNewKernel => event::BOOTING_NEW_KERNEL,
        Event::PhonedHome => event::PHONED_HOME,
        Event::MachineReclaim => event::MACHINE_RECLAIM,
        Event::Unspecified => "",
    }
}

fn event(e: &v2::MachineProvisioningEvent) -> MachineEvent {
    MachineEvent {
        time: e.time.unwrap_or_default(),
        event: event_name(e.event).into(),
        message: e.message.clone(),
    }
}

fn events(recent: Option<&v2::MachineRecentProvisioningEvents>) -> MachineEvents {
    let Some(recent) = recent else {
        return MachineEvents::default();
    };
    MachineEvents {
        log: recent.events.iter().map(event).collect(),
        last_event_time: recent.last_event_time,
        last_error_event: recent.last_error_event.as_ref().map(event),
        crash_loop: recent.state == MachineProvisioningEventState::Crashloop,
        failed_machine_reclaim: recent.state == MachineProvisioningEventState::FailedReclaim,
    }
}

/// v1's type of a machine's network: the first private one is its primary.
fn machine_network(n: &v2::MachineNetwork, primary: bool) -> MachineNetwork {
    let private = matches!(
        n.network_type,
        NetworkType::Child | NetworkType::ChildShared
    );
    let networktype = match n.network_type {
        NetworkType::Child if primary => machine_network_type::PRIVATE_PRIMARY_UNSHARED,
        NetworkType::ChildShared if primary => machine_network_type::PRIVATE_PRIMARY_SHARED,
        NetworkType::Child | NetworkType::ChildShared => {
            machine_network_type::PRIVATE_SECONDARY_SHARED
        }
        NetworkType::Underlay => machine_network_type::UNDERLAY,
        _ => machine_network_type::EXTERNAL,
    };
    MachineNetwork {
        networkid: n.network.clone(),
        prefixes: n.prefixes.clone(),
        ips: n.ips.clone(),
        destinationprefixes: n.destination_prefixes.clone(),
        networktype: networktype.into(),
        networktypev2: network_type(n.network_type).into(),
        nattypev2: nat_type(n.nat_type).into(),
        asn: u64::from(n.asn),
        nat: n.nat_type == metalstack_api::types::network::NATType::Ipv4Masquerade,
        private,
        underlay: n.network_type == NetworkType::Underlay,
        projectid: n.project.clone().unwrap_or_default(),
        ..Default::default()
    }
}

fn protocol(p: IPProtocol) -> String {
    match p {
        IPProtocol::Udp => "udp".into(),
        IPProtocol::Tcp | IPProtocol::Unspecified => "tcp".into(),
    }
}

fn rules(r: &v2::FirewallRules) -> FirewallRules {
    let ports = |ports: &[u32]| {
        ports
            .iter()
            .filter_map(|p| i32::try_from(*p).ok())
            .collect()
    };
    FirewallRules {
        egress: (r.egress.iter())
            .map(|e| FirewallEgressRule {
                protocol: protocol(e.protocol),
                ports: ports(&e.ports),
                to: e.to.clone(),
                comment: e.comment.clone(),
            })
            .collect(),
        ingress: (r.ingress.iter())
            .map(|i| FirewallIngressRule {
                protocol: protocol(i.protocol),
                ports: ports(&i.ports),
                from: i.from.clone(),
                to: i.to.clone(),
                comment: i.comment.clone(),
            })
            .collect(),
    }
}

fn allocation(a: &v2::MachineAllocation, phoned_home: bool) -> MachineAllocation {
    let mut primary = true;
    let networks = a.networks.iter().map(|n| {
        let private = matches!(
            n.network_type,
            NetworkType::Child | NetworkType::ChildShared
        );
        let converted = machine_network(n, private && primary);
        primary &= !private;
        converted
    });
    let role = match a.allocation_type {
        MachineAllocationType::Firewall => ROLE_FIREWALL,
        _ => ROLE_MACHINE,
    };
    MachineAllocation {
        allocationuuid: a.uuid.clone(),
        created: (a.meta.as_ref())
            .and_then(|m| m.created_at)
            .unwrap_or_default(),
        name: a.name.clone(),
        hostname: a.hostname.clone(),
        project: a.project.clone(),
        image: a.image.clone().map(super::catalog::image),
        networks: networks.collect(),
        succeeded: phoned_home,
        role: role.into(),
        firewall_rules: a.firewall_rules.as_ref().map(rules),
        ..Default::default()
    }
}

/// A v2 machine in metal-api's model; its tags are its labels and its allocation's.
pub(super) fn machine(m: &v2::Machine) -> Machine {
    let recent = m.recent_provisioning_events.as_ref();
    let phoned_home = recent.is_some_and(|r| r.phoned_home());
    let mut labels = Meta::labels(m.meta.as_ref());
    if let Some(a) = &m.allocation {
        labels.extend(Meta::labels(a.meta.as_ref()));
    }
    let liveliness = match m.status.as_ref().map(|s| s.liveliness) {
        Some(MachineLiveliness::Alive) => "Alive",
        Some(MachineLiveliness::Dead) => "Dead",
        Some(MachineLiveliness::Unknown) => "Unknown",
        _ => "",
    };
    let meta = m.meta.as_ref();
    Machine {
        id: m.uuid.clone(),
        partition: (m.partition.as_ref()).map(|p| Partition {
            id: p.id.clone(),
            ..Default::default()
        }),
        rackid: m.rack.clone(),
        size: (m.size.as_ref()).map(|s| Size {
            id: s.id.clone(),
            ..Default::default()
        }),
        allocation: m.allocation.as_ref().map(|a| allocation(a, phoned_home)),
        liveliness: liveliness.into(),
        events: events(recent),
        tags: tags_of(&labels),
        created: meta.and_then(|m| m.created_at).unwrap_or_default(),
        changed: meta.and_then(|m| m.updated_at).unwrap_or_default(),
        ..Default::default()
    }
}

/// Does `m` match every field `find` gives?
fn found(m: &Machine, find: &MachineFindRequest) -> bool {
    let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    let a = m.allocation.as_ref();
    let of_allocation = |want: &Option<String>, have: fn(&MachineAllocation) -> &str| {
        want.is_none() || a.is_some_and(|a| is(want, have(a)))
    };
    let networks: Vec<&str> = a
        .map(|a| a.networks.iter().map(|n| n.networkid.as_str()).collect())
        .unwrap_or_default();
    is(&find.id, &m.id)
        && is(
            &find.partition_id,
            m.partition.as_ref().map_or("", |p| &p.id),
        )
        && is(&find.sizeid, m.size.as_ref().map_or("", |s| &s.id))
        && is(&find.rackid, &m.rackid)
        && carries(&m.tags, &find.tags)
        && of_allocation(&find.allocation_name, |a| &a.name)
        && of_allocation(&find.allocation_project, |a| &a.project)
        && of_allocation(&find.allocation_hostname, |a| &a.hostname)
        && of_allocation(&find.allocation_role, |a| &a.role)
        && of_allocation(&find.allocation_image_id, |a| {
            a.image.as_ref().map_or("", |i| &i.id)
        })
        && find
            .network_ids
            .iter()
            .all(|n| networks.contains(&n.as_str()))
}

fn bmc_command(action: PowerAction) -> Result<MachineBMCCommand> {
    match action {
        PowerAction::On => Ok(MachineBMCCommand::On),
        PowerAction::Off => Ok(MachineBMCCommand::Off),
        PowerAction::Reset => Ok(MachineBMCCommand::Reset),
        PowerAction::Cycle => Ok(MachineBMCCommand::Cycle),
        other => Err(Failure::Unsupported(format!(
            "capms sends {other:?} to a BMC through API v1 only"
        ))),
    }
}

/// The v2 request allocating what `req` asks for; `rules` make it a firewall.
fn create_request(
    req: &MachineAllocateRequest,
    rules: Option<&FirewallRules>,
) -> Result<MachineServiceCreateRequest> {
    if req.uuid.as_deref().is_some_and(|u| !u.is_empty()) {
        return Err(Failure::Unsupported(
            "a project token cannot allocate a given machine (uuid) through API v2: \
             metal-apiserver lets only admins pin one"
                .into(),
        ));
    }
    let mut networks: Vec<MachineAllocationNetwork> = (req.networks.iter().flatten())
        .map(|n| MachineAllocationNetwork {
            network: n.networkid.clone(),
            ips: Vec::new(),
        })
        .collect();
    // v1's IPs name no network; v2's are given with theirs: with the last network, the external
    // one where capms's given addresses live.
    if let Some(external) = networks.last_mut() {
        external.ips = req.ips.clone();
    }
    let labels = |tags: &[String]| {
        (!tags.is_empty()).then(|| Labels {
            labels: labels_of(tags),
        })
    };
    let user_data = (!req.user_data.is_empty())
        .then(|| base64::engine::general_purpose::STANDARD.encode(&req.user_data));
    Ok(MachineServiceCreateRequest {
        project: req.projectid.clone(),
        name: req.name.clone(),
        hostname: Some(req.hostname.clone()).filter(|h| !h.is_empty()),
        partition: req.partitionid.clone(),
        size: req.sizeid.clone(),
        image: req.imageid.clone(),
        ssh_public_keys: req.ssh_pub_keys.clone(),
        userdata: user_data,
        labels: labels(&req.tags),
        networks,
        placement_labels: labels(&req.placement_tags),
        allocation_type: if rules.is_some() {
            MachineAllocationType::Firewall
        } else {
            MachineAllocationType::Machine
        },
        firewall_spec: rules.map(|r| FirewallSpec {
            firewall_rules: Some(v2_rules(r)),
        }),
    })
}

fn v2_rules(r: &FirewallRules) -> v2::FirewallRules {
    let protocol = |p: &str| match p {
        "udp" => IPProtocol::Udp,
        _ => IPProtocol::Tcp,
    };
    let ports = |ports: &[i32]| {
        ports
            .iter()
            .filter_map(|p| u32::try_from(*p).ok())
            .collect()
    };
    v2::FirewallRules {
        egress: (r.egress.iter())
            .map(|e| v2::FirewallEgressRule {
                protocol: protocol(&e.protocol),
                ports: ports(&e.ports),
                to: e.to.clone(),
                comment: e.comment.clone(),
            })
            .collect(),
        ingress: (r.ingress.iter())
            .map(|i| v2::FirewallIngressRule {
                protocol: protocol(&i.protocol),
                ports: ports(&i.ports),
                to: i.to.clone(),
                from: i.from.clone(),
                comment: i.comment.clone(),
            })
            .collect(),
    }
}

impl Backend {
    pub(crate) async fn machine(&self, id: &str) -> Result<Machine> {
        Ok(machine(&self.api.machine(&self.project, id).await?))
    }

    /// One listing of the project (by partition and size when given), kept as `find` asks:
    /// one call however many machines match.
    pub(crate) async fn machine_find(&self, find: &MachineFindRequest) -> Result<Vec<Machine>> {
        let request = MachineServiceListRequest {
            project: (find.allocation_project.clone()).unwrap_or_else(|| self.project.clone()),
            query: Some(MachineQuery::default()),
        };
        let listed = self.api.machines(&request).await?;
        let converted = listed.iter().map(machine);
        Ok(converted.filter(|m| found(m, find)).collect())
    }

    /// A machine, or with `rules` a firewall.
    pub(crate) async fn machine_allocate(
        &self,
        req: &MachineAllocateRequest,
        rules: Option<&FirewallRules>,
    ) -> Result<Machine> {
        let request = create_request(req, rules)?;
        Ok(machine(&self.api.create_machine(&request).await?))
    }

    /// Frees machine `id`: v2's Delete answers once the machine is freed, which the caller
    /// waits for at most [`FREE_WAIT`]; a longer free goes on by itself and its machine is
    /// answered as it was asked for.
    pub(crate) async fn machine_free(self: &Arc<Self>, id: &str) -> Result<Machine> {
        let backend = Arc::clone(self);
        let uuid = id.to_owned();
        let delete = tokio::spawn(async move {
            let freed = backend.api.delete_machine(&backend.project, &uuid).await;
            if let Err(e) = &freed {
                tracing::warn!(machine = %uuid, error = %e, "freeing through API v2 failed");
            }
            freed
        });
        match tokio::time::timeout(FREE_WAIT, delete).await {
            Ok(Ok(freed)) => Ok(machine(&freed?)),
            Ok(Err(joined)) => Err(Failure::Unsupported(format!("the free stopped: {joined}"))),
            Err(_) => Ok(Machine {
                id: id.to_owned(),
                ..Default::default()
            }),
        }
    }

    /// The project's firewalls `find` finds.
    pub(crate) async fn firewall_find(&self, find: &MachineFindRequest) -> Result<Vec<Machine>> {
        let firewalls = MachineFindRequest {
            allocation_role: Some(ROLE_FIREWALL.into()),
            ..find.clone()
        };
        self.machine_find(&firewalls).await
    }

    /// Refused: API v2 has no reinstall.
    pub(crate) async fn machine_reinstall(&self, id: &str, image: &str) -> Result<Machine> {
        Err(Failure::Unsupported(format!(
            "API v2 has no reinstall: machine {id} keeps its image ({image} not installed)"
        )))
    }

    pub(crate) async fn machine_power(&self, id: &str, action: PowerAction) -> Result<Machine> {
        let command = bmc_command(action)?;
        self.api.bmc_command(&self.project, id, command).await?;
        self.machine(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::AllocationNetwork;

    #[test]
    fn a_v1_allocation_becomes_the_v2_create_that_means_it() {
        let req = MachineAllocateRequest {
            projectid: "p".into(),
            partitionid: "lab".into(),
            sizeid: "s".into(),
            imageid: "ubuntu-26.4".into(),
            name: "w".into(),
            user_data: "#cloud-config\n".into(),
            tags: vec!["a=b".into()],
            networks: Some(vec![AllocationNetwork {
                networkid: "private".into(),
                autoacquire: Some(true),
            }]),
            ..Default::default()
        };
        let create = create_request(&req, None).unwrap_or_else(|_| panic!("a request"));
        assert_eq!(create.userdata.as_deref(), Some("I2Nsb3VkLWNvbmZpZwo="));
        assert_eq!(
            create.labels.map(|l| l.labels),
            Some([("a".into(), "b".into())].into())
        );
        assert_eq!(create.allocation_type, MachineAllocationType::Machine);
        let pinned = MachineAllocateRequest {
            uuid: Some("m".into()),
            ..req
        };
        assert!(matches!(
            create_request(&pinned, None),
            Err(Failure::Unsupported(_))
        ));
    }

    #[test]
    fn a_machine_is_found_by_its_own_labels_and_its_allocation_s() {
        let v2_machine = v2::Machine {
            uuid: "m".into(),
            meta: Some(Meta {
                labels: Some(Labels::of([("made-by", "v1")])),
                ..Default::default()
            }),
            allocation: Some(v2::MachineAllocation {
                meta: Some(Meta {
                    labels: Some(Labels::of([("cluster", "c")])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let m = machine(&v2_machine);
        for tags in [vec!["made-by=v1".to_owned()], vec!["cluster=c".to_owned()]] {
            let find = MachineFindRequest {
                tags,
                ..Default::default()
            };
            assert!(found(&m, &find), "{find:?}");
        }
        let other = MachineFindRequest {
            tags: vec!["cluster=d".into()],
            ..Default::default()
        };
        assert!(!found(&m, &other));
    }
}
