//! The webhook configurations the install manifests and the tests register: generated from the
//! route table, sending creations and spec changes only.

use super::*;

#[test]
fn webhook_configurations_come_from_the_route_table() {
    let [mutating, validating] = webhook_configurations(
        &ClientConfig::Url {
            base: "https://127.0.0.1:9443".into(),
            ca_bundle: b"CA".to_vec(),
        },
        None,
    );
    let paths = |c: &Value| -> Vec<String> {
        c["webhooks"]
            .as_array()
            .expect("webhooks")
            .iter()
            .map(|w| w["clientConfig"]["url"].as_str().expect("url").to_owned())
            .collect()
    };
    let mounted: Vec<String> = routes()
        .iter()
        .map(|r| format!("https://127.0.0.1:9443{}", r.path()))
        .collect();
    for p in paths(&mutating).iter().chain(&paths(&validating)) {
        assert!(mounted.contains(p), "{p} is not mounted");
    }
    assert_eq!(
        paths(&validating).len(),
        6,
        "one validating webhook per kind"
    );
    for w in validating["webhooks"].as_array().expect("webhooks") {
        assert_eq!(
            (w["failurePolicy"].as_str(), w["sideEffects"].as_str()),
            (Some("Fail"), Some("None"))
        );
        assert_eq!(
            w["rules"][0]["operations"],
            json!(["CREATE", "UPDATE"]),
            "deletion is never sent, so never blocked"
        );
    }
}

#[test]
fn the_configurations_send_only_creations_and_spec_changes() {
    let configurations = webhook_configurations(
        &ClientConfig::Url {
            base: "https://127.0.0.1:9443".into(),
            ca_bundle: b"CA".to_vec(),
        },
        None,
    );
    for configuration in configurations {
        for webhook in configuration["webhooks"].as_array().expect("webhooks") {
            assert_eq!(
                webhook["matchConditions"],
                json!([{"name": "spec-changed", "expression": super::super::manifests::SPEC_CHANGED}])
            );
        }
    }
}
