//! metal-stack's API v2, as metal-apiserver serves it: the Connect protocol's unary calls with
//! JSON bodies (`POST /metalstack.api.v2.<Service>/<Method>`), a project token as the bearer,
//! and failures as Connect codes. The typed messages are the parts of the protos
//! (`metalstack/api/v2/*.proto`) that capms sends and reads; fields it does not read are
//! skipped when an answer is decoded.

mod budget;
mod calls;
mod client;
mod error;
mod token;
pub mod types;

pub use client::{Client, DEFAULT_CALLS_PER_MINUTE};
pub use error::{Code, Error};
pub use token::{Token, TokenError};
