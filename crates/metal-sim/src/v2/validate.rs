//! The protos' `buf.validate` rules for the fields a provider sends, checked as metal-apiserver's
//! protovalidate interceptor does after authorization: every violation listed in one
//! `invalid_argument`, each with its field path and rule id, in protovalidate's wording.

use super::connect::{Code, ConnectError};
use serde_json::Value;

/// One broken rule: the field's path, protovalidate's message and the rule's id.
struct Violation {
    field: String,
    message: String,
    rule: &'static str,
}

fn is_uuid(text: &str) -> bool {
    uuid::Uuid::try_parse(text).is_ok() && text.len() == 36
}

/// `string.uuid` on `field` (an empty string is no UUID, as protovalidate has it).
fn uuid_rule(request: &Value, field: &str, found: &mut Vec<Violation>) {
    let Some(value) = request.get(field) else {
        // An absent proto3 string is "", which is no UUID either.
        found.push(Violation {
            field: field.into(),
            message: "value is empty, which is not a valid UUID".into(),
            rule: "string.uuid_empty",
        });
        return;
    };
    if !value.as_str().is_some_and(is_uuid) {
        found.push(Violation {
            field: field.into(),
            message: "value must be a valid UUID".into(),
            rule: "string.uuid",
        });
    }
}

/// The fields of `procedure`'s request that must be UUIDs.
fn uuid_fields(procedure: &str) -> &'static [&'static str] {
    match procedure.rsplit_once('/').map(|(_, m)| m) {
        _ if procedure.contains("TokenService")
            || procedure.contains("Partition")
            || procedure.contains("SizeService")
            || procedure.contains("SizeImageConstraintService")
            || procedure.contains("HealthService")
            || procedure.contains("ImageService") =>
        {
            &[]
        }
        Some("Get" | "Delete" | "BMCCommand") if procedure.contains("MachineService") => {
            &["uuid", "project"]
        }
        _ => &["project"],
    }
}

/// The rules of `MachineService/Create` beyond its project: at least one network, user data of
/// at most 32768 characters, at most 50 SSH keys.
fn create_rules(request: &Value, found: &mut Vec<Violation>) {
    let networks = request["networks"].as_array().map_or(0, Vec::len);
    if networks == 0 {
        found.push(Violation {
            field: "networks".into(),
            message: "value must contain at least 1 item(s)".into(),
            rule: "repeated.min_items",
        });
    }
    if request["userdata"]
        .as_str()
        .is_some_and(|u| u.chars().count() > 32768)
    {
        found.push(Violation {
            field: "userdata".into(),
            message: "value length must be at most 32768 characters".into(),
            rule: "string.max_len",
        });
    }
    if request["sshPublicKeys"]
        .as_array()
        .is_some_and(|k| k.len() > 50)
    {
        found.push(Violation {
            field: "ssh_public_keys".into(),
            message: "value must contain no more than 50 item(s)".into(),
            rule: "repeated.max_items",
        });
    }
}

/// The request of `procedure` against its rules.
pub fn validate(procedure: &str, request: &Value) -> Result<(), ConnectError> {
    let mut found = Vec::new();
    // NetworkService's List and ListBaseNetworks ignore an empty project.
    let optional = procedure.contains("NetworkService/List");
    for field in uuid_fields(procedure) {
        let empty = request[*field].as_str().is_none_or(str::is_empty);
        if !(optional && empty) {
            uuid_rule(request, field, &mut found);
        }
    }
    if procedure.ends_with("MachineService/Create") {
        create_rules(request, &mut found);
    }
    if found.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = found
        .iter()
        .map(|v| format!(" - {}: {} [{}]", v.field, v.message, v.rule))
        .collect();
    Err(ConnectError::new(
        Code::InvalidArgument,
        format!("validation error:\n{}", lines.join("\n")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CREATE: &str = "/metalstack.api.v2.MachineService/Create";
    const PROJECT: &str = "00000000-0000-0000-0000-000000000001";

    #[test]
    fn every_broken_rule_is_listed_with_its_field_and_rule_id() {
        let e = validate(CREATE, &json!({"project": "p", "networks": []})).expect_err("refused");
        assert_eq!(e.code, Code::InvalidArgument);
        assert_eq!(
            e.message,
            "validation error:\n - project: value must be a valid UUID [string.uuid]\n - networks: value must contain at least 1 item(s) [repeated.min_items]"
        );
        let good = json!({"project": PROJECT, "networks": [{"network": "n"}]});
        assert!(validate(CREATE, &good).is_ok());
        let keys: Vec<String> = (0..51).map(|n| format!("ssh-ed25519 k{n}")).collect();
        let many =
            json!({"project": PROJECT, "networks": [{"network": "n"}], "sshPublicKeys": keys});
        assert!(validate(CREATE, &many).is_err());
    }

    #[test]
    fn a_machine_is_named_by_uuid_and_network_listings_may_omit_the_project() {
        let get = "/metalstack.api.v2.MachineService/Get";
        let e = validate(get, &json!({"uuid": "x", "project": PROJECT})).expect_err("refused");
        assert!(
            e.message.contains(" - uuid: value must be a valid UUID"),
            "{}",
            e.message
        );
        assert!(
            validate(
                "/metalstack.api.v2.NetworkService/ListBaseNetworks",
                &json!({})
            )
            .is_ok()
        );
        assert!(validate("/metalstack.api.v2.TokenService/Refresh", &json!({})).is_ok());
        let e = validate("/metalstack.api.v2.IPService/List", &json!({})).expect_err("refused");
        assert!(e.message.contains("[string.uuid_empty]"), "{}", e.message);
    }
}
