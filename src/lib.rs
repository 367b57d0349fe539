//! capms: a Cluster API infrastructure provider for metal-stack.
pub mod api;
pub mod capi;
pub mod controllers;
pub mod metal;
pub mod server;
pub mod sim;
pub mod telemetry;
pub mod tls;
pub mod webhooks;
