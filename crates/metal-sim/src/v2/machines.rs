//! `MachineService` Get and List over the simulator's state: a project sees only the machines
//! allocated to it. A machine is written as the `metalstack.api.v2.Machine` message, its tags as
//! labels (`key=value`; a tag without `=` keeps an empty value), the labels a v2 `Create` gave
//! its allocation as the allocation's, apart from the tags, as metal-apiserver keeps them.

use super::connect::{ConnectError, not_found};
use super::labels::carries;
use super::networks::{nat_type, network_type};
use crate::state::{MachineRecord, State};
use metal_api::types::{FirewallRules, MachineAllocation, MachineEvent, MachineNetwork};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The v2 event types, by the event strings machines send (their `enum_string_value`).
const EVENT_TYPES: [(&str, &str); 11] = [
    ("Alive", "ALIVE"),
    ("Crashed", "CRASHED"),
    ("PXE Booting", "PXE_BOOTING"),
    ("Planned Reboot", "PLANNED_REBOOT"),
    ("Preparing", "PREPARING"),
    ("Registering", "REGISTERING"),
    ("Waiting", "WAITING"),
    ("Installing", "INSTALLING"),
    ("Booting New Kernel", "BOOTING_NEW_KERNEL"),
    ("Phoned Home", "PHONED_HOME"),
    ("Machine Reclaim", "MACHINE_RECLAIM"),
];

fn event_type(event: &str) -> String {
    let known = EVENT_TYPES.iter().find(|(s, _)| *s == event);
    let name = known.map_or("UNSPECIFIED", |(_, name)| name);
    format!("MACHINE_PROVISIONING_EVENT_TYPE_{name}")
}

fn event(e: &MachineEvent) -> Value {
    json!({"time": e.time.to_string(), "event": event_type(&e.event), "message": e.message})
}

/// A machine's tags as v2 labels.
pub fn labels(tags: &[String]) -> BTreeMap<String, String> {
    let pairs = tags.iter().map(|t| match t.split_once('=') {
        Some((k, v)) => (k.to_owned(), v.to_owned()),
        None => (t.clone(), String::new()),
    });
    pairs.collect()
}

/// `metalstack.api.v2.MachineNetwork` of a v1 machine network.
fn machine_network(n: &MachineNetwork) -> Value {
    let mut network = json!({
        "network": n.networkid, "prefixes": n.prefixes, "destinationPrefixes": n.destinationprefixes,
        "ips": n.ips, "networkType": network_type(&n.networktypev2),
        "natType": nat_type(&n.nattypev2), "vrf": n.vrf.to_string(), "asn": n.asn,
    });
    if !n.projectid.is_empty() {
        network["project"] = n.projectid.clone().into();
    }
    network
}

/// `metalstack.api.v2.FirewallRules` of v1's (`tcp` as `IP_PROTOCOL_TCP`).
fn firewall_rules(rules: &FirewallRules) -> Value {
    let protocol = |p: &str| format!("IP_PROTOCOL_{}", p.to_uppercase());
    let egress: Vec<Value> = rules
        .egress
        .iter()
        .map(|r| json!({"protocol": protocol(&r.protocol), "ports": r.ports, "to": r.to, "comment": r.comment}))
        .collect();
    let ingress: Vec<Value> = rules
        .ingress
        .iter()
        .map(|r| json!({"protocol": protocol(&r.protocol), "ports": r.ports, "to": r.to, "from": r.from, "comment": r.comment}))
        .collect();
    json!({"egress": egress, "ingress": ingress})
}

/// `metalstack.api.v2.MachineAllocation` of `a`, with the labels a v2 `Create` gave it.
fn allocation(a: &MachineAllocation, labels: &BTreeMap<String, String>) -> Value {
    let mut allocation = json!({
        "uuid": a.allocationuuid, "name": a.name, "description": a.description,
        "createdBy": a.creator, "project": a.project, "hostname": a.hostname,
        "meta": {"createdAt": a.created.to_string()},
        "networks": a.networks.iter().map(machine_network).collect::<Vec<_>>(),
        "allocationType": format!("MACHINE_ALLOCATION_TYPE_{}", a.role.to_uppercase()),
    });
    if !labels.is_empty() {
        allocation["meta"]["labels"] = json!({"labels": labels});
    }
    if let Some(image) = &a.image {
        allocation["image"] = json!({"id": image.id});
    }
    if let Some(rules) = &a.firewall_rules {
        allocation["firewallRules"] = firewall_rules(rules);
    }
    allocation
}

/// The `metalstack.api.v2.Machine` message of `m`.
pub fn message(state: &State, m: &MachineRecord) -> Value {
    let mut machine = json!({
        "uuid": m.id,
        "meta": {"labels": {"labels": labels(&m.tags)}, "createdAt": m.created.to_string(),
                 "updatedAt": m.changed.to_string()},
        "partition": {"id": m.partition},
        "rack": m.rack,
        "size": {"id": m.size},
    });
    if let Some(a) = &m.allocation {
        machine["allocation"] = allocation(a, &m.allocation_labels);
    }
    let liveliness = state.liveliness(m).to_uppercase();
    machine["status"] = json!({"liveliness": format!("MACHINE_LIVELINESS_{liveliness}")});
    let mut events = Map::new();
    events.insert(
        "events".into(),
        m.events.iter().map(event).collect::<Vec<_>>().into(),
    );
    if let Some(t) = m.last_event_time {
        events.insert("lastEventTime".into(), t.to_string().into());
    }
    if let Some(e) = &m.last_error_event {
        events.insert("lastErrorEvent".into(), event(e));
    }
    let state = match (m.crash_loop, m.failed_machine_reclaim) {
        (true, _) => Some("MACHINE_PROVISIONING_EVENT_STATE_CRASHLOOP"),
        (_, true) => Some("MACHINE_PROVISIONING_EVENT_STATE_FAILED_RECLAIM"),
        _ => None,
    };
    if let Some(state) = state {
        events.insert("state".into(), state.into());
    }
    machine["recentProvisioningEvents"] = Value::Object(events);
    machine
}

fn of_project<'a>(m: &'a MachineRecord, project: &str) -> Option<&'a MachineRecord> {
    let allocated = m.allocation.as_ref()?;
    (allocated.project == project).then_some(m)
}

/// `MachineService/Get {uuid, project}`: NotFound, as metal-apiserver says it, for a machine of
/// another project.
pub fn get(state: &State, request: &Value) -> Result<Value, ConnectError> {
    let m = of_request(state, request)?;
    Ok(json!({"machine": message(state, m)}))
}

/// The machine a request names by `uuid`, when it is allocated to the request's `project`;
/// metal-apiserver's NotFound otherwise.
pub fn of_request<'a>(
    state: &'a State,
    request: &Value,
) -> Result<&'a MachineRecord, ConnectError> {
    let uuid = request["uuid"].as_str().unwrap_or_default();
    let project = request["project"].as_str().unwrap_or_default();
    let found = state
        .machines
        .get(uuid)
        .and_then(|m| of_project(m, project));
    found.ok_or_else(|| not_found("Machine", uuid))
}

/// Whether tags `tags` carry every label of `query.labels`.
pub fn labelled(tags: &[String], query: &Value) -> bool {
    carries(&labels(tags), &query["labels"])
}

/// A `Labels` message as v1 tags (`key=value`).
pub fn tags(labels: &Value) -> Vec<String> {
    let labels = labels["labels"].as_object().into_iter().flatten();
    labels
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect()
}

/// Whether `m` matches `query` (uuid, name, partition, size, rack, labels, the allocation's
/// labels).
fn matches(m: &MachineRecord, query: &Value) -> bool {
    let is = |field: &str, value: &str| query[field].as_str().is_none_or(|q| q == value);
    let name = m
        .allocation
        .as_ref()
        .map(|a| a.name.as_str())
        .unwrap_or_default();
    is("uuid", &m.id)
        && is("name", name)
        && is("partition", &m.partition)
        && is("size", &m.size)
        && is("rack", &m.rack)
        && labelled(&m.tags, query)
        && carries(&m.allocation_labels, &query["allocation"]["labels"])
}

/// `MachineService/List {project, query}`: the project's machines that match.
pub fn list(state: &State, request: &Value) -> Result<Value, ConnectError> {
    let project = request["project"].as_str().unwrap_or_default();
    let query = &request["query"];
    let machines: Vec<Value> = state
        .machines
        .values()
        .filter_map(|m| of_project(m, project))
        .filter(|m| matches(m, query))
        .map(|m| message(state, m))
        .collect();
    Ok(json!({"machines": machines}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_become_labels_and_events_their_v2_types() {
        let tags = ["a=b".to_owned(), "c".to_owned(), "d=e=f".to_owned()];
        let l = labels(&tags);
        assert_eq!(l["a"], "b");
        assert_eq!(l["c"], "");
        assert_eq!(l["d"], "e=f");
        assert_eq!(
            event_type("Phoned Home"),
            "MACHINE_PROVISIONING_EVENT_TYPE_PHONED_HOME"
        );
        assert_eq!(
            event_type("nonsense"),
            "MACHINE_PROVISIONING_EVENT_TYPE_UNSPECIFIED"
        );
    }
}
