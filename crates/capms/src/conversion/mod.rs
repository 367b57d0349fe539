//! Conversion between the API versions capms serves, for the apiserver's conversion webhook.
//!
//! Two schemas are served: capms's own (`v1alpha3` and `v1alpha4`, identical; `v1alpha4` is
//! stored) and the one of metal-stack's Go provider (`v1alpha1`). Converting between versions of
//! one schema only relabels the object. Between the schemas every field is mapped by a table per
//! kind ([`kinds`]); what the target cannot express travels in the [`KEPT_ANNOTATION`], so a
//! round trip through the other schema gives back the object it started from, as Cluster API's
//! own conversions do.
//!
//! Conversion is pure: JSON in, JSON out, no I/O. A conversion that would leave the target without
//! a field it requires is refused, naming the object and the field.

mod conditions;
mod engine;
pub mod kinds;
pub mod paths;
pub mod review;
#[cfg(test)]
mod tests;

pub use engine::convert;

use crate::api::common::GROUP;

/// Annotation holding, per schema, what an object had that the version it is now in cannot
/// express: restored when it is converted back.
pub(crate) const KEPT_ANNOTATION: &str = "conversion.capms.metal-stack.io/kept";

/// The schemas the served versions belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Schema {
    /// capms's own: `v1alpha3` and `v1alpha4`.
    Capms,
    /// metal-stack's Go provider (cluster-api-provider-metal-stack v0.8.0): `v1alpha1`.
    GoProvider,
}

impl Schema {
    /// The schema of a served version, by its name (`v1alpha4`) or apiVersion
    /// (`infrastructure.cluster.x-k8s.io/v1alpha4`).
    pub fn of(version: &str) -> Option<Schema> {
        let version = version
            .strip_prefix(GROUP)
            .and_then(|v| v.strip_prefix('/'))
            .unwrap_or(version);
        match version {
            "v1alpha3" | "v1alpha4" => Some(Schema::Capms),
            "v1alpha1" => Some(Schema::GoProvider),
            _ => None,
        }
    }

    /// The key under which the kept annotation holds what this schema could not pass on.
    fn key(self) -> &'static str {
        match self {
            Schema::Capms => "v1alpha4",
            Schema::GoProvider => "v1alpha1",
        }
    }
}

/// The served versions, oldest first.
pub const SERVED_VERSIONS: [&str; 3] = ["v1alpha1", "v1alpha3", "v1alpha4"];

/// Why an object could not be converted. Each is terminal for the request: the same object
/// converts the same way every time.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Refusal {
    #[error("cannot convert {object}: apiVersion {version:?} is not served; served: {served}")]
    UnknownVersion {
        object: String,
        version: String,
        served: String,
    },
    #[error("cannot convert {object}: kind {kind:?} has no conversion; convertible: {kinds}")]
    UnknownKind {
        object: String,
        kind: String,
        kinds: String,
    },
    #[error(
        "cannot convert {object} to {version}: {version} requires {field}, which it has no value for"
    )]
    MissingField {
        object: String,
        version: String,
        field: String,
    },
    #[error("cannot convert {object}: {field} must be an object")]
    NotAnObject { object: String, field: String },
    #[error(
        "cannot convert {object}: annotation {KEPT_ANNOTATION} is not what capms writes: {reason}"
    )]
    BadKeptAnnotation { object: String, reason: String },
}
