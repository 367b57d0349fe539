//! metal-api v1 as its Go clients speak it: wire types, HMAC signing, image resolution, the
//! providerID and tag keys metal-stack's components share, and a typed async client, which can
//! also make its calls through metal-stack's API v2 (metal-apiserver) with a project token.
//!
//! Nothing here knows Kubernetes: the provider and the simulator both build on it.

pub mod catalog;
pub mod client;
mod config;
pub mod error;
pub mod hmac;
pub mod images;
pub mod json;
pub mod provider_id;
pub mod size_images;
pub mod table;
pub mod tags;
mod tls;
pub mod types;
mod v2;

pub use catalog::{Catalog, MachineSummary, ProjectParts, PublicParts};
pub use client::{Auth, CallObserver, Client, Config};
pub use error::Error;
pub use provider_id::ProviderId;
