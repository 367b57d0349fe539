//! Requests as Go clients send them, and answers as metal-api's spec allows them:
//! - every POST body the simulator reads, derived from the spec with each optional field absent,
//!   `null` and empty, is accepted (no 400), as metal-api accepts it;
//! - a body that really is invalid gets metal-api's wrapped 400 naming the field;
//! - capms' own client reads spec-shaped answers: only the required fields, every optional one
//!   `null`, and every field present.

use crate::support;
use capms_test_support::contract;

use axum::extract::{Request, State};
use axum::response::IntoResponse;
use contract::{Caller, EDIT, Fill, Spec};
use metal_api::types::*;
use metal_sim::inventory::{Inventory, MachineSpec};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use support::RunningSim;

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
const PARTITION: &str = "mini-lab";
const PUBLIC: &str = "internet-mini-lab";
const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKv3u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7 capms@test";

/// Optional fields metal-api's code requires although its spec does not (metal-api.md §5.6 and
/// §5.8.1): leaving them out, `null` or empty is metal-api's 400, and the simulator's.
const REQUIRED_BY_CODE: [(&str, &str); 4] = [
    ("/v1/network/allocate", "projectid"),
    ("/v1/network/allocate", "partitionid"),
    ("/v1/machine/allocate", "networks"),
    ("/v1/firewall/allocate", "networks"),
];

/// The lab with enough machines for every allocation variant while freed ones are reclaimed.
fn big_lab() -> Inventory {
    let mut inventory = Inventory::default_lab();
    for n in 0..120 {
        inventory.machines.push(MachineSpec {
            id: format!("10000000-0000-0000-0000-{n:012}"),
            partition: PARTITION.into(),
            size: "v1-small-x86".into(),
            rack: format!("rack-{}", n % 3 + 1),
        });
    }
    inventory
}

/// A valid body for every POST route that takes one: the base each variant changes one field of.
fn base_body(template: &str, network: &str) -> Option<Value> {
    let networks = json!([{"networkid": network, "autoacquire": true}, {"networkid": PUBLIC, "autoacquire": true}]);
    let machine = json!({
        "name": "variant", "projectid": PROJECT, "partitionid": PARTITION, "sizeid": "v1-small-x86",
        "imageid": "debian-13", "ssh_pub_keys": [SSH_KEY], "networks": networks,
    });
    Some(match template {
        "/v1/partition/capacity" => json!({"projectid": PROJECT}),
        "/v1/image/find" => json!({"features": ["machine"]}),
        "/v1/project/find" => json!({"id": PROJECT}),
        "/v1/size-image-constraint/try" => json!({"size": "v1-small-x86", "image": "debian-13"}),
        "/v1/network/find" => json!({"partitionid": PARTITION}),
        "/v1/network/allocate" => {
            json!({"projectid": PROJECT, "partitionid": PARTITION, "name": "variant"})
        }
        "/v1/ip/find" => json!({"projectid": PROJECT}),
        "/v1/ip/allocate" | "/v1/ip/allocate/{ip}" => {
            json!({"networkid": PUBLIC, "projectid": PROJECT, "type": "ephemeral"})
        }
        "/v1/machine/find" | "/v1/firewall/find" | "/v1/machine/ipmi/find" => {
            json!({"allocation_project": PROJECT})
        }
        "/v1/machine/{id}/reinstall" => json!({"id": "variant", "imageid": "debian-13"}),
        power if power.starts_with("/v1/machine/{id}/power/") => json!({}),
        "/v1/machine/issues/evaluate" => {
            json!({"only": [], "omit": [], "severity": "", "last_error_threshold": 0})
        }
        "/v1/machine/allocate" => machine,
        "/v1/firewall/allocate" => {
            let mut firewall = machine;
            firewall["imageid"] = json!("firewall-ubuntu-3.0");
            firewall["firewall_rules"] = json!({"egress": [{"ports": [443], "to": ["0.0.0.0/0"]}]});
            firewall
        }
        _ => return None,
    })
}

/// Frees what a successful variant allocated, so the next one finds room.
async fn release(c: &mut Caller<'_>, template: &str, answer: &Value) {
    let id = |field: &str| answer[field].as_str().map(str::to_owned);
    match template {
        "/v1/network/allocate" => {
            let id = id("id").expect("network id");
            c.send(EDIT, "DELETE", &format!("/v1/network/free/{id}"), None)
                .await;
        }
        "/v1/ip/allocate" | "/v1/ip/allocate/{ip}" => {
            let address = id("ipaddress").expect("address");
            c.send(EDIT, "DELETE", &format!("/v1/ip/free/{address}"), None)
                .await;
        }
        "/v1/machine/allocate" | "/v1/firewall/allocate" => {
            let id = id("id").expect("machine id");
            c.send(EDIT, "DELETE", &format!("/v1/machine/{id}/free"), None)
                .await;
        }
        _ => {}
    }
}

#[tokio::test]
async fn bodies_with_optional_fields_absent_null_or_empty_are_accepted() {
    let Some(spec) = Spec::load() else { return };
    let sim = RunningSim::start(big_lab(), "/metal").await;
    let mut c = Caller::new(&spec, &sim.url);
    let allocate = json!({"projectid": PROJECT, "partitionid": PARTITION});
    let network = c
        .send(EDIT, "POST", "/v1/network/allocate", Some(allocate))
        .await;
    let network = network.body["id"].as_str().expect("network").to_owned();
    let mut refused = Vec::new();
    let mut sent = 0;
    for (method, template) in metal_sim::mounted_routes() {
        if method != "POST" {
            continue;
        }
        let Some(schema) = spec.request_schema("POST", &template) else {
            continue;
        };
        let base = base_body(&template, &network)
            .unwrap_or_else(|| panic!("no base body for POST {template}: add one"));
        let (_, optional) = spec.properties(&schema);
        for field in optional {
            if REQUIRED_BY_CODE.contains(&(template.as_str(), field.as_str())) {
                continue;
            }
            let empty = spec.empty_of(&spec.property_schema(&schema, &field));
            for (variant, value) in [
                ("absent", None),
                ("null", Some(Value::Null)),
                ("empty", Some(empty)),
            ] {
                let mut body = base.clone();
                match value {
                    None => drop(body.as_object_mut().expect("object").remove(&field)),
                    Some(v) => body[&field] = v,
                }
                let args: Vec<&str> = if template.contains('{') {
                    vec!["127.100.0.201"]
                } else {
                    vec![]
                };
                let answer = c
                    .call(EDIT, "POST", &template, &args, Some(body.clone()))
                    .await;
                sent += 1;
                if answer.status == 400 {
                    refused.push(format!(
                        "POST {template} with {field} {variant}: {} (body {body})",
                        answer.body
                    ));
                } else if answer.status < 300 {
                    release(&mut c, &template, &answer.body).await;
                }
            }
        }
    }
    println!("{sent} request bodies sent");
    assert!(sent > 100, "only {sent} variants were sent");
    assert!(
        refused.is_empty(),
        "bodies metal-api accepts were refused:\n{}",
        refused.join("\n")
    );
    assert!(
        c.violations.is_empty(),
        "answers that violate the spec:\n{}",
        c.violations.join("\n")
    );
}

#[tokio::test]
async fn invalid_bodies_get_a_wrapped_400_naming_the_field() {
    let Some(spec) = Spec::load() else { return };
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let mut c = Caller::new(&spec, &sim.url);
    let cases = [
        (
            "/v1/machine/allocate",
            json!({"projectid": 7, "networks": []}),
            "projectid",
        ),
        (
            "/v1/machine/allocate",
            json!({"projectid": PROJECT, "networks": [{"networkid": ["x"]}]}),
            "networks[0].networkid",
        ),
        (
            "/v1/firewall/allocate",
            json!({"firewall_rules": {"egress": "all"}}),
            "egress",
        ),
        (
            "/v1/ip/allocate",
            json!({"projectid": PROJECT, "type": "static"}),
            "networkid",
        ),
        (
            "/v1/network/allocate",
            json!({"projectid": PROJECT}),
            "partitionid",
        ),
        ("/v1/network/find", json!({"labels": ["a"]}), "labels"),
        ("/v1/machine/find", json!({"tags": "a=b"}), "tags"),
    ];
    for (template, body, field) in cases {
        let answer = c
            .call(EDIT, "POST", template, &[], Some(body.clone()))
            .await;
        let inner: Value =
            serde_json::from_str(answer.body.as_str().expect("string-wrapped error"))
                .expect("json");
        let message = inner["message"].as_str().unwrap_or_default();
        assert_eq!(answer.status, 400, "POST {template} {body}: {message}");
        assert!(
            message.contains(field),
            "POST {template} {body}: {message:?} does not name {field}"
        );
    }
    let malformed = c
        .send_text(
            EDIT,
            "POST",
            "/v1/machine/allocate",
            Some("{\"name\":".into()),
        )
        .await;
    assert_eq!(malformed.status, 400, "malformed JSON: {}", malformed.body);
    assert!(
        malformed
            .body
            .as_str()
            .is_some_and(|b| b.contains("cannot read request")),
        "{}",
        malformed.body
    );
    assert!(c.violations.is_empty(), "{}", c.violations.join("\n"));
}

/// A metal-api stand-in that answers every request from the spec: the success schema of the
/// matched route, filled as the current mode says.
async fn answer_from_spec(
    State((spec, fill)): State<(Arc<Spec>, Arc<Mutex<Fill>>)>,
    request: Request,
) -> axum::response::Response {
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let Some(template) = spec.template_for(&method, &path) else {
        return (
            axum::http::StatusCode::NOT_FOUND,
            format!("{method} {path} is not in the spec"),
        )
            .into_response();
    };
    let op = spec.operation(&method, &template).expect("operation");
    let (status, response) = ["200", "201"]
        .iter()
        .find_map(|s| {
            op["responses"]
                .get(*s)
                .map(|r| (s.parse::<u16>().expect("status"), r))
        })
        .expect("a success response");
    let mode = *fill.lock().expect("mode");
    let body = spec.sample(&response["schema"], mode);
    let status = axum::http::StatusCode::from_u16(status).expect("status");
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn must<T>(mode: Fill, what: &str, result: Result<T, metal_api::Error>) -> T {
    result.unwrap_or_else(|e| panic!("{mode:?}: {what}: {e}"))
}

#[tokio::test]
async fn capms_client_reads_every_answer_the_spec_allows() {
    let Some(spec) = Spec::load() else { return };
    let fill = Arc::new(Mutex::new(Fill::Required));
    let client = client_of_the_spec(spec, fill.clone()).await;
    for mode in [Fill::Required, Fill::NullOptionals, Fill::All] {
        *fill.lock().expect("mode") = mode;
        master_data_networks_and_ips(&client, mode).await;
        machines_and_firewalls(&client, mode).await;
    }
}

/// A capms client of a server that answers every route from metal-api's spec, filled as `fill`
/// says.
async fn client_of_the_spec(spec: Spec, fill: Arc<Mutex<Fill>>) -> metal_api::Client {
    let app = axum::Router::new()
        .fallback(answer_from_spec)
        .with_state((Arc::new(spec), fill));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    capms::tls::install_default_provider();
    let auth = metal_api::Auth::Hmac {
        key: "k".into(),
        auth_type: metal_api::hmac::AuthType::Edit,
    };
    metal_api::Client::new(metal_api::Config::new(url.parse().expect("url"), auth)).expect("client")
}

async fn master_data_networks_and_ips(client: &metal_api::Client, mode: Fill) {
    must(mode, "health", client.health().await);
    must(mode, "partitions", client.partitions().await);
    must(mode, "partition", client.partition("p").await);
    must(mode, "sizes", client.sizes().await);
    must(mode, "size", client.size("s").await);
    must(mode, "images", client.images().await);
    must(mode, "image", client.image("i").await);
    must(mode, "image latest", client.image_latest("i").await);
    must(
        mode,
        "size image constraints",
        client.size_image_constraints().await,
    );
    must(
        mode,
        "size image try",
        client.try_size_image("s", "i").await,
    );
    must(mode, "projects", client.projects().await);
    must(mode, "project", client.project("p").await);
    must(mode, "networks", client.networks().await);
    must(mode, "network", client.network("n").await);
    must(
        mode,
        "network find",
        client.network_find(&NetworkFindRequest::default()).await,
    );
    must(
        mode,
        "network allocate",
        client
            .network_allocate(&NetworkAllocateRequest::default())
            .await,
    );
    must(mode, "network free", client.network_free("n").await);
    must(mode, "ip", client.ip("127.0.0.1").await);
    must(
        mode,
        "ip find",
        client.ip_find(&IpFindRequest::default()).await,
    );
    must(
        mode,
        "ip allocate",
        client.ip_allocate(&IpAllocateRequest::default()).await,
    );
    must(
        mode,
        "ip allocate specific",
        client
            .ip_allocate_specific("127.0.0.1", &IpAllocateRequest::default())
            .await,
    );
    must(mode, "ip free", client.ip_free("127.0.0.1").await);
}

async fn machines_and_firewalls(client: &metal_api::Client, mode: Fill) {
    let machine = must(mode, "machine", client.machine("m").await);
    assert_eq!(machine.allocation.is_some(), mode == Fill::All, "{mode:?}");
    must(
        mode,
        "machine find",
        client.machine_find(&MachineFindRequest::default()).await,
    );
    must(
        mode,
        "machine allocate",
        client
            .machine_allocate(&MachineAllocateRequest::default())
            .await,
    );
    must(mode, "machine free", client.machine_free("m").await);
    must(mode, "firewall", client.firewall("f").await);
    must(
        mode,
        "firewall find",
        client.firewall_find(&MachineFindRequest::default()).await,
    );
    must(
        mode,
        "firewall allocate",
        client
            .firewall_allocate(&FirewallCreateRequest::default())
            .await,
    );
}
