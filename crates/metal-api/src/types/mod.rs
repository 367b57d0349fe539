//! metal-api v1 wire types (JSON field names as metal-api writes them), shared by the client
//! and the simulator. Responses decode leniently: every field has a default, unknown fields are
//! ignored, as Go's encoding/json does.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub type Labels = BTreeMap<String, String>;

pub(crate) fn epoch() -> Timestamp {
    Timestamp::UNIX_EPOCH
}

mod machine;
mod masterdata;
mod network;
mod power;

pub use machine::*;
pub use masterdata::*;
pub use network::*;
pub use power::*;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct HealthResponse {
    pub status: String,
    pub message: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct VersionResponse {
    pub name: String,
    pub version: String,
}

/// `HTTPErrorResponse` of metal-lib.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpErrorResponse {
    pub statuscode: u16,
    pub message: String,
}
