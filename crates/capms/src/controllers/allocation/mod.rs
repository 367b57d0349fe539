//! Machines capms allocates in metal-api, for MetalStackMachines and MetalStackFirewalls alike:
//! which machine an object means (`facts`, pure), finding the one already allocated for it
//! (`observe`), its health (`health`, pure), and recording, freeing exactly what carries the
//! object's owner tags and announcing it (`act`). The machine and firewall controllers share
//! this one definition.

mod act;
mod facts;
mod health;
mod observe;
mod racks;
mod step;

pub use act::{allocated, free};
pub(crate) use act::{announce, release};
pub(crate) use facts::{Found, InvalidProviderId, Lost, Target, named_machine};
pub(crate) use health::{health_condition, health_requeue};
pub use observe::teardown_query;
pub(crate) use observe::{lookup, owned, query, teardown_query_of};
pub(crate) use racks::{RackChoice, RackMachines};
pub use step::AllocationStep;
pub(crate) use step::record_patch;
