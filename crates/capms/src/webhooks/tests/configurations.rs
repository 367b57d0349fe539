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
fn the_configurations_send_spec_changes_but_not_the_managers_updates_nor_template_replicas() {
    use super::super::manifests::{
        SPEC_CHANGED, installed_manager_user, not_cloned_from_template, not_updated_by,
    };
    let user = "system:serviceaccount:capms-system:capms-manager";
    assert_eq!(installed_manager_user(), user);
    let configurations = webhook_configurations(
        &ClientConfig::Url {
            base: "https://127.0.0.1:9443".into(),
            ca_bundle: b"CA".to_vec(),
        },
        None,
        Some(user),
    );
    assert_eq!(
        not_updated_by(user),
        format!("request.operation != 'UPDATE' || request.userInfo.username != \"{user}\"")
    );
    let replicas = not_cloned_from_template(AdmittedKind::MachineTemplate);
    assert!(
        replicas.contains("object.metadata.annotations['cluster.x-k8s.io/cloned-from-groupkind'] != 'MetalStackMachineTemplate.infrastructure.cluster.x-k8s.io'"),
        "{replicas}"
    );
    for configuration in configurations {
        for webhook in configuration["webhooks"].as_array().expect("webhooks") {
            let mut expected = vec![
                json!({"name": "spec-changed", "expression": SPEC_CHANGED}),
                json!({"name": "not-the-manager", "expression": not_updated_by(user)}),
            ];
            let url = webhook["clientConfig"]["url"].as_str().expect("url");
            if url.ends_with("-metalstackmachine") {
                expected.push(json!({"name": "not-a-template-replica", "expression": replicas}));
            }
            assert_eq!(webhook["matchConditions"], json!(expected), "{url}");
        }
    }
}

#[test]
fn the_installed_manager_user_is_the_shipped_service_account() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let account = std::fs::read_to_string(root.join("manifests/rbac/service-account.yaml"))
        .expect("service-account.yaml");
    let deployment = std::fs::read_to_string(root.join("manifests/manager/deployment.yaml"))
        .expect("deployment.yaml");
    let name = crate::api::common::MANAGER_SERVICE_ACCOUNT;
    assert!(account.contains(&format!("name: {name}\n")), "{account}");
    assert!(
        account.contains(&format!(
            "namespace: {}\n",
            crate::api::common::WEBHOOK_NAMESPACE
        )),
        "{account}"
    );
    assert!(
        deployment.contains(&format!("serviceAccountName: {name}\n")),
        "{deployment}"
    );
}
