//! Partitions, sizes, images and projects.

use super::*;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct BootConfig {
    pub imageurl: String,
    pub kernelurl: String,
    pub commandline: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Partition {
    pub id: String,
    pub name: String,
    pub description: String,
    pub bootconfig: BootConfig,
    pub mgmtserviceaddress: String,
    pub labels: Labels,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl Default for Partition {
    fn default() -> Self {
        Partition {
            id: String::new(),
            name: String::new(),
            description: String::new(),
            bootconfig: BootConfig::default(),
            mgmtserviceaddress: String::new(),
            labels: Labels::new(),
            created: epoch(),
            changed: epoch(),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct SizeConstraint {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub min: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub max: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub identifier: String,
}

pub(crate) fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Size {
    pub id: String,
    pub name: String,
    pub description: String,
    pub constraints: Vec<SizeConstraint>,
    pub labels: Labels,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl Default for Size {
    fn default() -> Self {
        Size {
            id: String::new(),
            name: String::new(),
            description: String::new(),
            constraints: Vec::new(),
            labels: Labels::new(),
            created: epoch(),
            changed: epoch(),
        }
    }
}

/// Image feature that allows a machine allocation.
pub const FEATURE_MACHINE: &str = "machine";
/// Image feature that allows a firewall allocation.
pub const FEATURE_FIREWALL: &str = "firewall";

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub description: String,
    pub url: String,
    pub features: Vec<String>,
    #[serde(rename = "expirationDate")]
    pub expiration_date: Timestamp,
    pub classification: String,
    pub created: Timestamp,
    pub changed: Timestamp,
}

impl Default for Image {
    fn default() -> Self {
        Image {
            id: String::new(),
            name: String::new(),
            description: String::new(),
            url: String::new(),
            features: Vec::new(),
            expiration_date: epoch(),
            classification: "supported".into(),
            created: epoch(),
            changed: epoch(),
        }
    }
}

impl Image {
    pub fn has_feature(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ProjectMeta {
    pub id: String,
    pub kind: String,
    pub apiversion: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct Project {
    pub meta: ProjectMeta,
    pub name: String,
    pub description: String,
    pub tenant_id: String,
}

/// `POST /v1/image/find`: every given field must match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ImageFindRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classification: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
}

/// `POST /v1/project/find`: every given field must match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ProjectFindRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

/// `POST /v1/partition/capacity`: narrows the report to a partition and a size.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct PartitionCapacityRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sizeid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projectid: Option<String>,
}

/// Machines of one size in a partition, by what they are doing. Zero counts are omitted, as
/// metal-api omits them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ServerCapacity {
    pub size: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub total: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub phoned_home: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub waiting: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub other: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub othermachines: Vec<String>,
    #[serde(skip_serializing_if = "is_zero")]
    pub allocated: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub allocatable: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub free: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub unavailable: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub faulty: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faultymachines: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct PartitionCapacity {
    pub id: String,
    pub name: String,
    pub description: String,
    pub servers: Vec<ServerCapacity>,
}
