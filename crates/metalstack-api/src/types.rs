//! The messages capms sends and reads, in protojson: field names in lowerCamelCase, enums by
//! their value names, timestamps in RFC 3339. Unknown fields of an answer are skipped; empty
//! fields of a request are left out, as protojson writes them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `metalstack.api.v2.Labels`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Labels {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `metalstack.api.v2.Meta`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    #[serde(default)]
    pub labels: Option<Labels>,
}

/// `metalstack.api.v2.Machine`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    pub uuid: String,
    #[serde(default)]
    pub meta: Option<Meta>,
    #[serde(default)]
    pub rack: String,
    #[serde(default)]
    pub allocation: Option<MachineAllocation>,
    #[serde(default)]
    pub recent_provisioning_events: Option<MachineRecentProvisioningEvents>,
}

/// `metalstack.api.v2.MachineAllocation`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineAllocation {
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub project: String,
    #[serde(default)]
    pub hostname: String,
}

/// `metalstack.api.v2.MachineRecentProvisioningEvents`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineRecentProvisioningEvents {
    #[serde(default)]
    pub events: Vec<MachineProvisioningEvent>,
    #[serde(default)]
    pub last_event_time: Option<jiff::Timestamp>,
    #[serde(default)]
    pub last_error_event: Option<MachineProvisioningEvent>,
    /// `MACHINE_PROVISIONING_EVENT_STATE_CRASHLOOP`, `…_FAILED_RECLAIM`, or none.
    #[serde(default)]
    pub state: Option<String>,
}

/// `metalstack.api.v2.MachineProvisioningEvent`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct MachineProvisioningEvent {
    #[serde(default)]
    pub time: Option<jiff::Timestamp>,
    /// `MACHINE_PROVISIONING_EVENT_TYPE_PHONED_HOME` and the like.
    #[serde(default)]
    pub event: String,
    #[serde(default)]
    pub message: String,
}

/// `metalstack.api.v2.MachineServiceGetRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MachineServiceGetRequest {
    pub uuid: String,
    pub project: String,
}

/// `metalstack.api.v2.MachineServiceGetResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct MachineServiceGetResponse {
    pub machine: Machine,
}

/// `metalstack.api.v2.MachineQuery`: what capms asks by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MachineQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
}

/// `metalstack.api.v2.MachineServiceListRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MachineServiceListRequest {
    pub project: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<MachineQuery>,
}

/// `metalstack.api.v2.MachineServiceListResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct MachineServiceListResponse {
    #[serde(default)]
    pub machines: Vec<Machine>,
}

/// `metalstack.api.v2.TokenServiceRefreshRequest`: empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TokenServiceRefreshRequest {}

/// `metalstack.api.v2.TokenServiceRefreshResponse`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct TokenServiceRefreshResponse {
    pub secret: String,
}
