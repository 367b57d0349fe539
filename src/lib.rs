//! capms: a Cluster API infrastructure provider for metal-stack.
pub mod api;
pub mod metal;
pub mod sim;
pub mod telemetry;
pub mod tls;
