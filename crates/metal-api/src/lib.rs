//! metal-api v1 as its Go clients speak it: wire types, HMAC signing, image resolution, the
//! providerID and tag keys metal-stack's components share, and a typed async client.
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
pub mod table;
pub mod tags;
mod tls;
pub mod types;

pub use catalog::{Catalog, MachineSummary};
pub use client::{Auth, CallObserver, Client, Config};
pub use error::Error;
pub use provider_id::ProviderId;
