//! capms: a Cluster API infrastructure provider for metal-stack.
pub mod api;
pub mod capi;
pub mod controllers;
pub mod kube_client;
pub mod metrics;
pub mod networks;
pub mod ownership;
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
