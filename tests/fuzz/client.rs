//! The metal-api client reading metal-api's answers, spoilt field by field: nulls, missing
//! fields, extra fields and values of the wrong type. Go's reading of JSON is the contract
//! (nulls and missing fields are not set, extra fields ignored); whatever it refuses, it refuses
//! naming the field.

use super::*;
use metal_api::json::{DecodeError, decode};
use metal_api::types::{Image, Ip, Machine, MachineFindRequest, Network, Partition, Size};
use serde_json::Value;

/// Reads a document as the client reads one kind of answer.
type Reader = fn(&Value) -> Result<(), DecodeError>;

/// Decodes `doc` as `T`; Err only with the path of the field it refuses.
fn read<T: serde::de::DeserializeOwned>(doc: &Value) -> Result<(), DecodeError> {
    let bytes = serde_json::to_vec(doc).expect("json");
    decode::<T>(&bytes).map(|_| ())
}

#[test]
fn metal_api_answers_spoilt_field_by_field_are_read_or_refused_naming_the_field() {
    let state = lab();
    let catalog = state.catalog();
    let machines = state.machine_find(&MachineFindRequest::default());
    let answers: Vec<(&str, Value, Reader)> = vec![
        (
            "machines",
            serde_json::to_value(&machines).expect("json"),
            read::<Vec<Machine>>,
        ),
        (
            "machines as the catalog reads them",
            serde_json::to_value(&machines).expect("json"),
            read::<Vec<metal_api::MachineSummary>>,
        ),
        (
            "networks",
            serde_json::to_value(&catalog.networks).expect("json"),
            read::<Vec<Network>>,
        ),
        (
            "images",
            serde_json::to_value(&catalog.images).expect("json"),
            read::<Vec<Image>>,
        ),
        (
            "sizes",
            serde_json::to_value(&catalog.sizes).expect("json"),
            read::<Vec<Size>>,
        ),
        (
            "partitions",
            serde_json::to_value(&catalog.partitions).expect("json"),
            read::<Vec<Partition>>,
        ),
        (
            "ips",
            serde_json::to_value(state.ip_find(&Default::default())).expect("json"),
            read::<Vec<Ip>>,
        ),
    ];
    let mut rng = rng(0x3E7A_1A91);
    let (mut read_fine, mut refused) = (0, 0);
    for i in 0..cases() {
        let (what, doc, read) = &answers[i % answers.len()];
        let bad = spoilt(&mut rng, doc, &[PathSegment::Index(0)]);
        match read(&bad) {
            Ok(()) => read_fine += 1,
            Err(e) => {
                refused += 1;
                assert!(
                    !e.path.is_empty(),
                    "{what}: a refusal without a field: {e}\n{bad}"
                );
            }
        }
    }
    eprintln!("metal-api answers: {read_fine} read, {refused} refused naming the field");
    assert!(read_fine > 0 && refused > 0);
}
