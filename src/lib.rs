//! capms: a Cluster API infrastructure provider for metal-stack.
pub mod api;
