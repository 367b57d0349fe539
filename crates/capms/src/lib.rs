//! capms: a Cluster API infrastructure provider for metal-stack.
//!
//! The layers, each importing only from those above it:
//! - the facts: [`api`] (our kinds), [`capi`] (what capms reads of Cluster API's), [`ownership`]
//!   (the marks on everything capms allocates), [`networks`] (metal-api's network rules), and
//!   the process's plumbing ([`metrics`], [`kube_client`], [`tls`], [`telemetry`]);
//! - [`cache`]: the watch caches, each cluster's machine listings and metal-api's master data;
//! - [`reconciler`]: the engine every controller runs on (observe → decide → act → status);
//! - [`controllers`], [`webhooks`] and [`conversion`] (between the served API versions), which
//!   share the layers above and never import each other;
//! - [`server`], [`leader`] and [`runtime`], which start everything; `main` parses flags.

pub mod api;
pub mod cache;
pub mod capi;
pub mod controllers;
pub mod conversion;
pub(crate) mod kube_client;
pub(crate) mod leader;
pub mod metrics;
pub(crate) mod networks;
pub mod ownership;
pub mod reconciler;
pub mod runtime;
pub mod server;
pub mod telemetry;
pub mod tls;
pub mod webhooks;

/// The valid choices an error message names: sorted, without repeats, "none" when empty. Every
/// user-facing error (webhooks and controller conditions) lists them this way.
pub(crate) fn choices<I: IntoIterator<Item = S>, S: AsRef<str>>(items: I) -> String {
    let mut v: Vec<String> = items.into_iter().map(|s| s.as_ref().to_owned()).collect();
    v.sort();
    v.dedup();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
