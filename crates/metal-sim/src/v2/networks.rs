//! `NetworkService` Create, Delete, List and ListBaseNetworks over metal-api's networks: a
//! project's child networks are made from its partition's super network, and the base networks
//! (super, external, underlay: those of no project) are listed for any project.

use super::connect::{ConnectError, not_found, refused};
use super::labels::{carries, label_map};
use crate::state::State;
use metal_api::types::{Network, NetworkAllocateRequest};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// A v1 type (`child-shared`) as its v2 enum value.
pub(super) fn network_type(v1: &str) -> String {
    format!("NETWORK_TYPE_{}", v1.to_uppercase().replace('-', "_"))
}

pub(super) fn nat_type(v1: &str) -> &'static str {
    match v1 {
        "ipv4-masq" => "NAT_TYPE_IPV4_MASQUERADE",
        "none" => "NAT_TYPE_NONE",
        _ => "NAT_TYPE_UNSPECIFIED",
    }
}

/// `{"IPv4": 22}` as a `ChildPrefixLength`.
fn lengths(v1: &BTreeMap<String, u8>) -> Value {
    let lengths: Map<String, Value> = v1
        .iter()
        .map(|(family, length)| (family.to_lowercase(), (*length).into()))
        .collect();
    Value::Object(lengths)
}

/// The `metalstack.api.v2.Network` message of `n`.
fn message(n: &Network) -> Value {
    let mut network = json!({
        "id": n.id,
        "meta": {"labels": {"labels": n.labels}, "createdAt": n.created.to_string(),
                 "updatedAt": n.changed.to_string()},
        "name": n.name, "description": n.description, "partition": n.partitionid,
        "prefixes": n.prefixes, "destinationPrefixes": n.destinationprefixes,
        "type": network_type(&n.networktype), "natType": nat_type(&n.nattype),
    });
    if !n.projectid.is_empty() {
        network["project"] = n.projectid.clone().into();
    }
    if let Some(lengths_) = &n.defaultchildprefixlength {
        network["defaultChildPrefixLength"] = lengths(lengths_);
    }
    if let Some(vrf) = n.vrf {
        network["vrf"] = vrf.into();
    }
    if let Some(parent) = &n.parentnetworkid {
        network["parentNetwork"] = parent.clone().into();
    }
    network
}

fn text(request: &Value, field: &str) -> String {
    request[field].as_str().unwrap_or_default().to_owned()
}

/// `NetworkService/Create`: a child network of the project in the partition.
pub fn create(state: &mut State, request: &Value) -> Result<Value, ConnectError> {
    let length = request["length"].as_object().into_iter().flatten();
    let allocate = NetworkAllocateRequest {
        projectid: text(request, "project"),
        partitionid: text(request, "partition"),
        name: text(request, "name"),
        description: text(request, "description"),
        labels: label_map(&request["labels"]),
        length: length
            .filter_map(|(family, l)| {
                let l = u8::try_from(l.as_u64()?).ok()?;
                Some((family.replace("ip", "IP"), l))
            })
            .collect(),
        ..Default::default()
    };
    let network = state.network_allocate(&allocate).map_err(refused)?;
    Ok(json!({"network": message(&network)}))
}

/// `NetworkService/Delete {id, project}`: a network of the project.
pub fn delete(state: &mut State, request: &Value) -> Result<Value, ConnectError> {
    let id = text(request, "id");
    let project = text(request, "project");
    if state
        .networks
        .get(&id)
        .is_none_or(|n| n.projectid != project)
    {
        return Err(not_found("Network", &id));
    }
    let network = state.network_free(&id).map_err(refused)?;
    Ok(json!({"network": message(&network)}))
}

/// Whether `n` matches `query` (id, name, partition, type, parent, labels).
fn matches(n: &Network, query: &Value) -> bool {
    let is = |field: &str, value: &str| query[field].as_str().is_none_or(|q| q == value);
    let parent = n.parentnetworkid.as_deref().unwrap_or_default();
    is("id", &n.id)
        && is("name", &n.name)
        && is("partition", &n.partitionid)
        && is("type", &network_type(&n.networktype))
        && is("parentNetwork", parent)
        && carries(&n.labels, &query["labels"])
}

/// `NetworkService/Get {id, project}`: a network of the project, or one of no project (a base
/// network any project may use).
pub fn get(state: &State, request: &Value) -> Result<Value, ConnectError> {
    let id = text(request, "id");
    let project = text(request, "project");
    let found = state.networks.get(&id);
    let visible = found.filter(|n| n.projectid.is_empty() || n.projectid == project);
    let network = visible.ok_or_else(|| not_found("Network", &id))?;
    Ok(json!({"network": message(network)}))
}

fn listed(state: &State, request: &Value, of: impl Fn(&Network) -> bool) -> Value {
    let query = &request["query"];
    let networks: Vec<Value> = state
        .networks
        .values()
        .filter(|n| of(n) && matches(n, query))
        .map(message)
        .collect();
    json!({"networks": networks})
}

/// `NetworkService/List {project, query}`: the project's networks that match.
pub fn list(state: &State, request: &Value) -> Result<Value, ConnectError> {
    let project = text(request, "project");
    Ok(listed(state, request, |n| n.projectid == project))
}

/// `NetworkService/ListBaseNetworks {project, query}`: the networks of no project that match.
pub fn list_base(state: &State, request: &Value) -> Result<Value, ConnectError> {
    Ok(listed(state, request, |n| n.projectid.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_network_and_nat_types_become_v2_enum_values() {
        assert_eq!(network_type("child-shared"), "NETWORK_TYPE_CHILD_SHARED");
        assert_eq!(network_type("super"), "NETWORK_TYPE_SUPER");
        assert_eq!(nat_type("ipv4-masq"), "NAT_TYPE_IPV4_MASQUERADE");
        let v1 = [("IPv4".to_owned(), 22u8)].into();
        assert_eq!(lengths(&v1), json!({"ipv4": 22}));
    }
}
