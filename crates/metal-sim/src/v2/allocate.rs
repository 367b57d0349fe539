//! `MachineService/Create`, `/Delete` and `/BMCCommand` over the same allocation, freeing and
//! power actions as metal-api's:
//! a v2 request is taken as the v1 allocation it means (each network with its IPs, a firewall's
//! rules), so that what v1 and v2 allocate are one kind of machine. Its labels are the
//! allocation's, kept apart from the machine's tags as metal-apiserver keeps them.
//! An allocation metal-api would refuse is refused with its message, under the Connect code of
//! its HTTP status.

use super::connect::{Code, ConnectError, refused};
use super::labels::label_map;
use super::machines::{message, of_request, tags};
use super::tokens::Token;
use crate::Sim;
use metal_api::tags::MACHINE_ID;
use metal_api::types::{
    AllocationNetwork, FirewallEgressRule, FirewallIngressRule, FirewallRules,
    MachineAllocateRequest, PowerAction, ROLE_FIREWALL, ROLE_MACHINE,
};
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

fn strings(v: &Value) -> Vec<String> {
    let items = v.as_array().into_iter().flatten();
    items
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// `IP_PROTOCOL_TCP` as v1's `tcp`.
fn protocol(rule: &Value) -> String {
    let name = rule["protocol"].as_str().unwrap_or_default();
    name.trim_start_matches("IP_PROTOCOL_").to_lowercase()
}

fn ports(rule: &Value) -> Vec<i32> {
    let ports = rule["ports"].as_array().into_iter().flatten();
    ports
        .filter_map(|p| p.as_i64().and_then(|p| i32::try_from(p).ok()))
        .collect()
}

fn rules(spec: &Value) -> FirewallRules {
    let rules = &spec["firewallRules"];
    let comment = |r: &Value| r["comment"].as_str().unwrap_or_default().to_owned();
    let egress = rules["egress"].as_array().into_iter().flatten();
    let ingress = rules["ingress"].as_array().into_iter().flatten();
    FirewallRules {
        egress: egress
            .map(|r| FirewallEgressRule {
                protocol: protocol(r),
                ports: ports(r),
                to: strings(&r["to"]),
                comment: comment(r),
            })
            .collect(),
        ingress: ingress
            .map(|r| FirewallIngressRule {
                protocol: protocol(r),
                ports: ports(r),
                from: strings(&r["from"]),
                to: strings(&r["to"]),
                comment: comment(r),
            })
            .collect(),
    }
}

/// The v1 allocation a `MachineServiceCreateRequest` means.
fn allocation(request: &Value) -> MachineAllocateRequest {
    let text = |field: &str| request[field].as_str().unwrap_or_default().to_owned();
    let networks = request["networks"].as_array().into_iter().flatten();
    let (mut chosen, mut ips) = (Vec::new(), Vec::new());
    for network in networks {
        let given = strings(&network["ips"]);
        chosen.push(AllocationNetwork {
            networkid: network["network"].as_str().unwrap_or_default().to_owned(),
            autoacquire: Some(given.is_empty()),
        });
        ips.extend(given);
    }
    MachineAllocateRequest {
        uuid: request["uuid"].as_str().map(str::to_owned),
        name: text("name"),
        description: text("description"),
        hostname: text("hostname"),
        projectid: text("project"),
        partitionid: text("partition"),
        sizeid: text("size"),
        imageid: text("image"),
        networks: Some(chosen),
        ips,
        ssh_pub_keys: strings(&request["sshPublicKeys"]),
        user_data: text("userdata"),
        tags: Vec::new(),
        placement_tags: tags(&request["placementLabels"]),
    }
}

/// `MachineService/Create`: a machine or, with `MACHINE_ALLOCATION_TYPE_FIREWALL`, a firewall
/// with its rules; it installs on the simulator's timers as a v1 allocation does.
pub fn create(sim: &Sim, token: Option<&Token>, request: &Value) -> Result<Value, ConnectError> {
    let creator = token.map(|t| t.user.clone()).unwrap_or_default();
    let firewall = request["allocationType"] == "MACHINE_ALLOCATION_TYPE_FIREWALL";
    let rules = firewall.then(|| rules(&request["firewallSpec"]));
    let role = if firewall {
        ROLE_FIREWALL
    } else {
        ROLE_MACHINE
    };
    let (machine, lease) = {
        let mut state = sim.state();
        // metal-apiserver refuses a size image constraint's violation as invalid, before all else.
        let (size, image) = (request["size"].as_str(), request["image"].as_str());
        let refusal = state.size_image_refusal(size.unwrap_or_default(), image.unwrap_or_default());
        if let Some(refusal) = refusal {
            return Err(ConnectError::new(Code::InvalidArgument, refusal));
        }
        let machine = state
            .machine_allocate(&allocation(request), rules.as_ref(), role, &creator)
            .map_err(refused)?;
        let lease = state.lease(&machine.id);
        if let Some(record) = state.machines.get_mut(&machine.id) {
            record.allocation_labels = label_map(&request["labels"]);
        }
        let record = state.machines.get(&machine.id).map(|m| message(&state, m));
        (record.unwrap_or_default(), lease)
    };
    if let (Some(lease), Some(id)) = (lease, machine["uuid"].as_str()) {
        sim.spawn_install(id.to_owned(), lease);
    }
    Ok(json!({"machine": machine}))
}

/// `MachineService/Delete {uuid, project}`: frees a machine of the project; the answer waits
/// for [`freed_up`].
pub fn delete(sim: &Sim, _: Option<&Token>, request: &Value) -> Result<Value, ConnectError> {
    let uuid = request["uuid"].as_str().unwrap_or_default();
    let freed = {
        let mut state = sim.state();
        let before = message(&state, of_request(&state, request)?);
        state.machine_free(uuid).map_err(refused)?;
        before
    };
    sim.spawn_reclaim(uuid.to_owned());
    Ok(json!({"machine": freed}))
}

/// What `MachineService/Delete` waits for, as metal-apiserver's waits for its free-up task: the
/// freed machine's IPs released (on the simulator's timers), for at most the release's delay
/// and ten seconds more.
pub fn freed_up(sim: Sim, request: Value) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let uuid = request["uuid"].as_str().unwrap_or_default().to_owned();
        let tag = format!("{MACHINE_ID}={uuid}");
        let deadline = Instant::now() + sim.config.timings.ip_release + Duration::from_secs(10);
        while Instant::now() < deadline {
            let held = sim.state().ips.values().any(|ip| ip.tags.contains(&tag));
            if !held {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// A `MachineBMCCommand` as the power action the BMC carries out; None for the commands a
/// project does not send (the machine lifecycle's own) and the unspecified one.
fn power_action(command: &str) -> Option<PowerAction> {
    let action = match command.strip_prefix("MACHINE_BMC_COMMAND_")? {
        "ON" => PowerAction::On,
        "OFF" => PowerAction::Off,
        "RESET" => PowerAction::Reset,
        "CYCLE" => PowerAction::Cycle,
        "BOOT_TO_BIOS" => PowerAction::Bios,
        "BOOT_FROM_DISK" => PowerAction::Disk,
        "BOOT_FROM_PXE" => PowerAction::Pxe,
        "IDENTIFY_LED_ON" => PowerAction::ChassisIdentifyLedOn,
        "IDENTIFY_LED_OFF" => PowerAction::ChassisIdentifyLedOff,
        _ => return None,
    };
    Some(action)
}

/// `MachineService/BMCCommand {uuid, project, command}`: queued for the machine's BMC and
/// answered at once; a reboot it causes goes on on the simulator's timers.
pub fn bmc_command(sim: &Sim, _: Option<&Token>, request: &Value) -> Result<Value, ConnectError> {
    let uuid = request["uuid"].as_str().unwrap_or_default();
    let command = request["command"].as_str().unwrap_or_default();
    let Some(action) = power_action(command) else {
        return Err(ConnectError::new(
            Code::InvalidArgument,
            format!(
                "command {command:?} cannot be sent to a machine's BMC; valid: MACHINE_BMC_COMMAND_ON, _OFF, _RESET, _CYCLE, _BOOT_TO_BIOS, _BOOT_FROM_DISK, _BOOT_FROM_PXE, _IDENTIFY_LED_ON, _IDENTIFY_LED_OFF"
            ),
        ));
    };
    let reboot = {
        let mut state = sim.state();
        of_request(&state, request)?;
        let (_, reboot) = state.machine_power(uuid, action, "").map_err(refused)?;
        reboot
    };
    if let Some(lease) = reboot {
        sim.spawn_reboot(uuid.to_owned(), lease);
    }
    Ok(json!({}))
}
