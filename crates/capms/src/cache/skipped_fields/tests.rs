use super::*;
use crate::capi::Machine;

const MACHINE: &str = r#"{
    "apiVersion": "cluster.x-k8s.io/v1beta2",
    "kind": "Machine",
    "metadata": {
        "name": "w-0",
        "namespace": "team-a",
        "labels": {"cluster.x-k8s.io/cluster-name": "prod"},
        "managedFields": [{"manager": "capi", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:x": {}}}}}],
        "resourceVersion": "7"
    },
    "spec": {"clusterName": "prod", "bootstrap": {"dataSecretName": "w-0-bootstrap"}},
    "status": {"phase": "Provisioning", "conditions": [
        {"type": "Ready", "status": "False", "reason": "NotReady",
            "lastTransitionTime": "2026-12-06T20:00:00Z"},
        {"type": "NodeReady", "status": "Unknown", "reason": "Waiting",
            "lastTransitionTime": "2026-12-06T20:00:00Z"}
    ]}
}"#;

#[test]
fn decodes_as_the_kind_does_without_managed_fields() {
    let full: Machine = serde_json::from_str(MACHINE).expect("full");
    let WithoutManagedFields(lean): WithoutManagedFields<Machine> =
        serde_json::from_str(MACHINE).expect("without");
    assert!(full.metadata.managed_fields.is_some());
    assert_eq!(lean.metadata.managed_fields, None);
    // Of the conditions, the watch keeps those capms reads (`capi::READ_CONDITIONS`).
    let conditions = lean.status.as_ref().map(|s| s.conditions.len());
    assert_eq!(conditions, Some(1));
    assert!(lean.condition("NodeReady").is_some());
    let mut expected = full.clone();
    expected.metadata.managed_fields = None;
    assert_eq!(
        serde_json::to_value(&lean).expect("lean json"),
        serde_json::to_value(&expected).expect("expected json")
    );
}

#[test]
fn escaped_keys_decode_and_bad_values_are_still_errors() {
    // A key with an escape (decoded, not borrowed) is read too.
    let json = MACHINE.replace("\"spec\":", "\"sp\\u0065c\":");
    let WithoutManagedFields(lean): WithoutManagedFields<Machine> =
        serde_json::from_str(&json).expect("without");
    assert_eq!(lean.spec.cluster_name, "prod");
    let bad = MACHINE.replace("\"clusterName\": \"prod\"", "\"clusterName\": 7");
    let error = serde_json::from_str::<WithoutManagedFields<Machine>>(&bad).expect_err("bad");
    assert!(error.to_string().contains("expected a string"), "{error}");
}

#[derive(serde::Deserialize, Debug, Default, PartialEq)]
#[serde(default)]
struct Outer {
    id: String,
    big: Vec<String>,
    inner: Option<Inner>,
    list: Vec<Inner>,
    mode: Option<Mode>,
    count: Option<Count>,
}

#[derive(serde::Deserialize, Debug, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Fast,
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Count(u32);

#[derive(serde::Deserialize, Debug, Default, PartialEq)]
#[serde(default)]
struct Inner {
    name: String,
    secret: String,
}

const OUTER: &str = r#"{"id": "m1", "big": ["a", "b"],
    "inner": {"name": "n", "secret": "s"},
    "list": [{"name": "l", "secret": "t"}], "mode": "fast", "count": 3}"#;

fn skipping(paths: Paths) -> Outer {
    let mut de = serde_json::Deserializer::from_str(OUTER);
    decode_skipping(&mut de, paths).expect("decodes")
}

#[test]
fn the_values_under_the_paths_are_skipped_as_if_absent_also_inside_an_option() {
    let lean = skipping(&[&["big"], &["inner", "secret"]]);
    assert_eq!(lean.id, "m1");
    assert!(lean.big.is_empty());
    let inner = lean.inner.expect("inner");
    assert_eq!((inner.name.as_str(), inner.secret.as_str()), ("n", ""));
    assert_eq!(
        lean.list[0].secret, "t",
        "a path does not lead through a list"
    );
}

#[test]
fn without_paths_or_with_paths_that_match_nothing_everything_decodes() {
    let full: Outer = serde_json::from_str(OUTER).expect("full");
    assert_eq!(skipping(&[]), full);
    assert_eq!(full.mode, Some(Mode::Fast));
    // Paths leading through a string, an enum and a newtype decode them unchanged.
    let through = skipping(&[&["id", "x"], &["mode", "x"], &["count", "x"], &["absent"]]);
    assert_eq!(through, full);
    let null = r#"{"id": "m2", "inner": null}"#;
    let mut de = serde_json::Deserializer::from_str(null);
    let lean: Outer = decode_skipping(&mut de, &[&["inner", "secret"]]).expect("null");
    assert_eq!(lean.inner, None);
}

#[test]
fn a_path_ending_in_first_keeps_the_lists_first_element_and_steps_over_the_rest() {
    let json = r#"{"id": "m1", "big": ["a", "b", "c"], "list": [{"name": "l"}, {"name": "x",
        "secret": {"not": ["a", "string"]}}], "mode": "fast", "count": 3}"#;
    let decode = |json: &str, paths: Paths| -> Outer {
        let mut de = serde_json::Deserializer::from_str(json);
        decode_skipping(&mut de, paths).expect("decodes")
    };
    let lean = decode(json, &[&["big", FIRST], &["list", FIRST]]);
    assert_eq!(lean.big, ["a"]);
    assert_eq!(lean.list.len(), 1);
    assert_eq!(lean.list[0].name, "l");
    assert_eq!(
        (lean.id.as_str(), lean.mode, lean.count),
        ("m1", Some(Mode::Fast), Some(Count(3))),
        "what follows the list decodes"
    );
    assert!(decode(r#"{"big": []}"#, &[&["big", FIRST]]).big.is_empty());
    let full = decode(
        json.replace(r#"{"not": ["a", "string"]}"#, "\"s\"")
            .as_str(),
        &[],
    );
    assert_eq!(full.big.len(), 3, "only the paths' lists are trimmed");
    let bad = r#"{"big": ["a", "b"], "list": [{"name": 7}]}"#;
    let mut de = serde_json::Deserializer::from_str(bad);
    let error = decode_skipping::<Outer, _>(&mut de, &[&["list", FIRST]]).expect_err("bad");
    assert!(error.to_string().contains("expected a string"), "{error}");
}
