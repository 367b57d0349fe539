//! The catalog's messages: the newest image of an OS version, and whether a size takes an image.

use super::Meta;
use serde::{Deserialize, Serialize};

rpc!("ImageService", "Latest", ImageServiceLatestRequest => ImageServiceLatestResponse);
rpc!("SizeImageConstraintService", "Try", SizeImageConstraintServiceTryRequest => SizeImageConstraintServiceTryResponse);

/// `metalstack.api.v2.Image`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    pub id: String,
    #[serde(default)]
    pub meta: Option<Meta>,
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
