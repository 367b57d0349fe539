//! The API as files and types, without a cluster: the committed CRDs are what the Rust types
//! generate and every schema is structural and documented (`crds`); seed 000's manifests
//! deserialize without losing a field (`seed_manifests`); no test waits a fixed time
//! (`fixed_sleeps`).

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support as support;

mod crds;
mod fixed_sleeps;
mod seed_manifests;
