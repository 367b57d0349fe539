//! metal-api as capms and metal-stack's own clients see it, served by the simulator: its answers
//! against metal-api's swagger spec (`spec`), request bodies as Go clients send them
//! (`requests`), metal-stack's Go client driving it (`metal_go`), and capms's client through the
//! whole life of every entity, every error path and every fault (`client`); the simulator's API
//! v2 against metal-apiserver's protos (`v2`), and capms's v2 client against them (`v2_contract`) and
//! against the simulator (`v2_client`).

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support as support;

mod client;
mod metal_go;
mod requests;
mod spec;
mod v2;
mod v2_backend;
mod v2_client;
mod v2_contract;
