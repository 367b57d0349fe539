//! The messages capms sends and reads, in protojson: field names in lowerCamelCase, enums by
//! their value names, timestamps in RFC 3339. Each type is named as its proto message or enum
//! and has only the fields capms uses. Unknown fields of an answer are skipped, an enum value
//! this client does not know reads as the enum's unspecified value, and empty optional fields of
//! a request are left out, as protojson writes them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A request message: the procedure it is sent to and the message that answers it.
pub trait Rpc: Serialize {
    /// `/<package>.<Service>/<Method>`.
    const PROCEDURE: &'static str;
    type Response: DeserializeOwned;
}

/// `rpc!("Service", "Method", Request => Response)`: `Request` is sent to
/// `/metalstack.api.v2.Service/Method` and answered with `Response`.
macro_rules! rpc {
    ($service:literal, $method:literal, $request:ty => $response:ty) => {
        impl crate::types::Rpc for $request {
            const PROCEDURE: &'static str = concat!("/metalstack.api.v2.", $service, "/", $method);
            type Response = $response;
        }
    };
}

pub mod catalog;
pub mod machine;
pub mod network;
pub mod token;

pub use token::{TokenServiceRefreshRequest, TokenServiceRefreshResponse};

use std::collections::BTreeMap;

/// `metalstack.api.v2.Labels`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Labels {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Labels {
    /// Labels of `pairs`.
    pub fn of<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Labels {
        let labels = pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Labels { labels }
    }
}

/// `metalstack.api.v2.Meta`: what capms reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<jiff::Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<jiff::Timestamp>,
}

impl Meta {
    /// The labels, none when absent.
    pub fn labels(meta: Option<&Meta>) -> std::collections::BTreeMap<String, String> {
        let labels = meta.and_then(|m| m.labels.as_ref());
        labels.map(|l| l.labels.clone()).unwrap_or_default()
    }
}
