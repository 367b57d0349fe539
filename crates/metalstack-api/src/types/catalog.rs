//! The catalog's messages: partitions, sizes, images (and the newest of an OS version), whether a
//! size takes an image, the project, and the server's health.

use super::Meta;
use serde::{Deserialize, Serialize};

rpc!("ImageService", "Latest", ImageServiceLatestRequest => ImageServiceLatestResponse);
rpc!("ImageService", "List", ImageServiceListRequest => ImageServiceListResponse);
rpc!("PartitionService", "List", PartitionServiceListRequest => PartitionServiceListResponse);
rpc!("SizeService", "List", SizeServiceListRequest => SizeServiceListResponse);
rpc!("ProjectService", "Get", ProjectServiceGetRequest => ProjectServiceGetResponse);
rpc!("HealthService", "Get", HealthServiceGetRequest => HealthServiceGetResponse);
rpc!("SizeImageConstraintService", "Try", SizeImageConstraintServiceTryRequest => SizeImageConstraintServiceTryResponse);

/// `metalstack.api.v2.Image`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    pub id: String,
    #[serde(default)]
    pub meta: Option<Meta>,
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub features: Vec<ImageFeature>,
    #[serde(default)]
    pub classification: ImageClassification,
    #[serde(default)]
    pub expires_at: Option<jiff::Timestamp>,
}

/// `metalstack.api.v2.ImageClassification`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageClassification {
    #[serde(rename = "IMAGE_CLASSIFICATION_PREVIEW")]
    Preview,
    #[serde(rename = "IMAGE_CLASSIFICATION_SUPPORTED")]
    Supported,
    #[serde(rename = "IMAGE_CLASSIFICATION_DEPRECATED")]
    Deprecated,
    #[default]
    #[serde(rename = "IMAGE_CLASSIFICATION_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.ImageServiceLatestRequest`: `os` is `<name>-<major>.<minor>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageServiceLatestRequest {
    pub os: String,
}

/// `metalstack.api.v2.ImageServiceLatestResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageServiceLatestResponse {
    pub image: Image,
}

/// `metalstack.api.v2.SizeImageConstraintServiceTryRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeImageConstraintServiceTryRequest {
    pub size: String,
    pub image: String,
}

/// `metalstack.api.v2.SizeImageConstraintServiceTryResponse`: empty; a refusal is an error.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeImageConstraintServiceTryResponse {}

/// `metalstack.api.v2.ImageFeature`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageFeature {
    #[serde(rename = "IMAGE_FEATURE_MACHINE")]
    Machine,
    #[serde(rename = "IMAGE_FEATURE_FIREWALL")]
    Firewall,
    #[default]
    #[serde(rename = "IMAGE_FEATURE_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.ImageServiceListRequest`: every image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageServiceListRequest {}

/// `metalstack.api.v2.ImageServiceListResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageServiceListResponse {
    #[serde(default)]
    pub images: Vec<Image>,
}

/// `metalstack.api.v2.Partition`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub id: String,
    #[serde(default)]
    pub meta: Option<Meta>,
    #[serde(default)]
    pub description: String,
}

/// `metalstack.api.v2.PartitionServiceListRequest`: every partition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionServiceListRequest {}

/// `metalstack.api.v2.PartitionServiceListResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionServiceListResponse {
    #[serde(default)]
    pub partitions: Vec<Partition>,
}

/// `metalstack.api.v2.Size`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size {
    pub id: String,
    #[serde(default)]
    pub meta: Option<Meta>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub constraints: Vec<SizeConstraint>,
}

/// `metalstack.api.v2.SizeConstraint`: `min` and `max` are 64-bit, so protojson strings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeConstraint {
    #[serde(default, rename = "type")]
    pub type_: SizeConstraintType,
    #[serde(default)]
    pub min: String,
    #[serde(default)]
    pub max: String,
    #[serde(default)]
    pub identifier: Option<String>,
}

/// `metalstack.api.v2.SizeConstraintType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SizeConstraintType {
    #[serde(rename = "SIZE_CONSTRAINT_TYPE_CORES")]
    Cores,
    #[serde(rename = "SIZE_CONSTRAINT_TYPE_MEMORY")]
    Memory,
    #[serde(rename = "SIZE_CONSTRAINT_TYPE_STORAGE")]
    Storage,
    #[serde(rename = "SIZE_CONSTRAINT_TYPE_GPU")]
    Gpu,
    #[default]
    #[serde(rename = "SIZE_CONSTRAINT_TYPE_UNSPECIFIED", other)]
    Unspecified,
}

/// `metalstack.api.v2.SizeServiceListRequest`: every size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeServiceListRequest {}

/// `metalstack.api.v2.SizeServiceListResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeServiceListResponse {
    #[serde(default)]
    pub sizes: Vec<Size>,
}

/// `metalstack.api.v2.Project`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Project {
    pub uuid: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tenant: String,
}

/// `metalstack.api.v2.ProjectServiceGetRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectServiceGetRequest {
    pub project: String,
}

/// `metalstack.api.v2.ProjectServiceGetResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectServiceGetResponse {
    pub project: Project,
}

/// `metalstack.api.v2.HealthServiceGetRequest`: empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthServiceGetRequest {}

/// `metalstack.api.v2.HealthServiceGetResponse`: what capms reads of it (that it answers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthServiceGetResponse {}
