//! Fuzzing, in every CI run: the admission handlers take generated AdmissionReviews (valid
//! objects of every kind spoilt field by field, as `v1alpha4` and as the Go provider's
//! `v1alpha1`, and random bytes and JSON), the conversion webhook takes generated
//! ConversionReviews (spoilt objects of every kind and served version, converted there and
//! back), the metal-api client decodes generated responses
//! (metal-api's answers spoilt field by field). No panic, no 5xx, every denial and every
//! refusal naming its field. `FUZZ_CASES` sets the number of cases of each (10,000 unless set;
//! `make fuzz` runs more).

// A test fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support::fuzz::{PathSegment, paths, random_json, spoil};
use metal_sim::inventory::Inventory;
use metal_sim::state::State;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod admission;
mod client;
mod conversion;

fn cases() -> usize {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";

/// The lab with one machine allocated into a private network of its project, as metal-api
/// would hold it once a cluster runs.
fn lab() -> State {
    let mut state = State::from_inventory(&Inventory::default_lab()).expect("inventory");
    let network = state
        .network_allocate(&metal_api::types::NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            ..Default::default()
        })
        .expect("network")
        .id;
    let request = metal_api::types::MachineAllocateRequest {
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        sizeid: "v1-small-x86".into(),
        imageid: "ubuntu-26.4".into(),
        networks: Some(vec![metal_api::types::AllocationNetwork {
            networkid: network,
            autoacquire: None,
        }]),
        tags: vec!["cluster.metal-stack.io/id=default.c".into()],
        ..Default::default()
    };
    state
        .machine_allocate(&request, None, "machine", "fuzz")
        .expect("allocated");
    state
}

/// `doc` spoilt at one of its values below `under`.
fn spoilt(rng: &mut StdRng, doc: &serde_json::Value, under: &[PathSegment]) -> serde_json::Value {
    let all = paths(doc, under);
    let path = &all[rng.random_range(0..all.len())];
    spoil(rng, doc, path)
}

fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}
