//! `IPService` Create, Get, Delete and List over metal-api's IPs: an IP is deleted by its address,
//! and a project sees only its own.

use super::connect::{ConnectError, not_found, refused};
use super::machines::{labelled, labels, tags};
use crate::state::State;
use metal_api::types::{Ip, IpAllocateRequest};
use serde_json::{Value, json};

/// The `metalstack.api.v2.IP` message of `ip`.
fn message(ip: &Ip) -> Value {
    let type_ = format!("IP_TYPE_{}", ip.type_.to_uppercase());
    json!({
        "uuid": ip.allocationuuid,
        "meta": {"labels": {"labels": labels(&ip.tags)}, "createdAt": ip.created.to_string(),
                 "updatedAt": ip.changed.to_string()},
        "ip": ip.ipaddress, "name": ip.name, "description": ip.description,
        "network": ip.networkid, "project": ip.projectid, "type": type_,
    })
}

fn text(request: &Value, field: &str) -> String {
    request[field].as_str().unwrap_or_default().to_owned()
}

/// `IPService/Create`: an IP of the network for the project, a given address or any; ephemeral
/// unless `IP_TYPE_STATIC`.
pub fn create(state: &mut State, request: &Value) -> Result<Value, ConnectError> {
    let static_ = request["type"] == "IP_TYPE_STATIC";
    let allocate = IpAllocateRequest {
        networkid: text(request, "network"),
        projectid: text(request, "project"),
        type_: if static_ { "static" } else { "ephemeral" }.into(),
        name: text(request, "name"),
        description: text(request, "description"),
        tags: tags(&request["labels"]),
        machineid: request["machine"].as_str().map(str::to_owned),
        addressfamily: None,
    };
    let specific = request["ip"].as_str();
    let ip = state.ip_allocate(&allocate, specific).map_err(refused)?;
    Ok(json!({"ip": message(&ip)}))
}

/// `IPService/Get {ip, project}`: an IP of the project, by its address.
pub fn get(state: &State, request: &Value) -> Result<Value, ConnectError> {
    let address = text(request, "ip");
    let project = text(request, "project");
    let found = state.ips.get(&address).filter(|ip| ip.projectid == project);
    let ip = found.ok_or_else(|| not_found("IP", &address))?;
    Ok(json!({"ip": message(ip)}))
}

/// `IPService/Delete {ip, project}`: an IP of the project, by its address.
pub fn delete(state: &mut State, request: &Value) -> Result<Value, ConnectError> {
    let address = text(request, "ip");
    let project = text(request, "project");
    if state
        .ips
        .get(&address)
        .is_none_or(|ip| ip.projectid != project)
    {
        return Err(not_found("IP", &address));
    }
    let ip = state.ip_free(&address).map_err(refused)?;
    Ok(json!({"ip": message(&ip)}))
}

/// `IPService/List {project, query}`: the project's IPs that match.
pub fn list(state: &State, request: &Value) -> Result<Value, ConnectError> {
    let project = text(request, "project");
    let query = &request["query"];
    let is = |field: &str, value: &str| query[field].as_str().is_none_or(|q| q == value);
    let ips: Vec<Value> = state
        .ips
        .values()
        .filter(|ip| ip.projectid == project)
        .filter(|ip| {
            is("ip", &ip.ipaddress)
                && is("network", &ip.networkid)
                && is("name", &ip.name)
                && is("uuid", &ip.allocationuuid)
                && labelled(&ip.tags, query)
        })
        .map(message)
        .collect();
    Ok(json!({"ips": ips}))
}
