//! metal-api v1: wire types, HMAC signing, image resolution and a typed async client.

pub mod cidr;
pub mod client;
pub mod error;
pub mod hmac;
pub mod images;
pub mod json;
pub mod table;
pub mod types;

pub use client::{Auth, Client, Config};
pub use error::Error;
