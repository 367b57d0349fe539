//! API v2 over HTTP, two tenants side by side in one simulator: each token reaches its own
//! project's machines only, and every refusal is metal-apiserver's code and message.

use crate::inventory::Inventory;
use crate::{Sim, SimConfig};
use metal_api::types::MachineAllocation;
use reqwest::StatusCode;
use serde_json::{Value, json};

const A: &str = "00000000-0000-0000-0000-000000000001";
const B: &str = "00000000-0000-0000-0000-00000000000b";
const MACHINE_A: &str = "00000000-0000-0000-0000-000000000001";
const MACHINE_B: &str = "00000000-0000-0000-0000-000000000002";
const LIST: &str = "/metalstack.api.v2.MachineService/List";
const GET: &str = "/metalstack.api.v2.MachineService/Get";
const REFRESH: &str = "/metalstack.api.v2.TokenService/Refresh";
const TRY: &str = "/metalstack.api.v2.SizeImageConstraintService/Try";
const CREATE: &str = "/metalstack.api.v2.MachineService/Create";

struct Served {
    url: String,
    http: reqwest::Client,
}

/// A simulator with project B beside the lab's A and a machine allocated to each, served on
/// loopback.
async fn served(rate_limit: u32) -> Served {
    let mut lab = Inventory::default_lab();
    lab.projects.push(crate::inventory::ProjectSpec {
        id: B.into(),
        name: "team-b".into(),
    });
    // Machines of the lab's size take no Debian before 14.
    lab.sizeimageconstraints
        .push(crate::inventory::SizeImageConstraintSpec {
            id: "v1-small-x86".into(),
            images: [("debian".to_owned(), ">= 14.0".to_owned())].into(),
        });
    let config = SimConfig {
        rate_limit,
        ..Default::default()
    };
    let sim = Sim::new(&lab, config).unwrap_or_else(|e| panic!("sim: {e}"));
    for (machine, project) in [(MACHINE_A, A), (MACHINE_B, B)] {
        let mut state = sim.state();
        let record = state.machines.get_mut(machine).expect("a lab machine");
        record.allocation = Some(MachineAllocation {
            project: project.into(),
            name: format!("worker-of-{project}"),
            ..Default::default()
        });
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(crate::serve(listener, sim, std::future::pending()));
    let _ = rustls::crypto::ring::default_provider().install_default();
    Served {
        url,
        http: reqwest::Client::new(),
    }
}

impl Served {
    /// A token minted through `/sim/v2/tokens`: its uuid and secret.
    async fn mint(&self, request: Value) -> (String, String) {
        let answer = self
            .http
            .post(format!("{}/sim/v2/tokens", self.url))
            .json(&request)
            .send()
            .await
            .expect("mint");
        assert_eq!(answer.status(), StatusCode::OK);
        let body: Value = answer.json().await.expect("json");
        let uuid = body["token"]["uuid"].as_str().expect("uuid").to_owned();
        (uuid, body["secret"].as_str().expect("secret").to_owned())
    }

    async fn call(&self, procedure: &str, token: Option<&str>, request: Value) -> (u16, Value) {
        let mut call = self
            .http
            .post(format!("{}{procedure}", self.url))
            .json(&request);
        if let Some(token) = token {
            call = call.bearer_auth(token);
        }
        let answer = call.send().await.expect("call");
        let status = answer.status().as_u16();
        (status, answer.json().await.expect("json"))
    }
}

fn uuids(answer: &Value) -> Vec<&str> {
    let machines = answer["machines"].as_array().expect("machines");
    machines.iter().filter_map(|m| m["uuid"].as_str()).collect()
}

fn role(project: &str, role: &str) -> Value {
    json!({"projectRoles": {project: role}})
}

#[tokio::test]
async fn each_token_reaches_its_own_project_and_is_refused_elsewhere_as_metal_apiserver_refuses() {
    let sim = served(0).await;
    let (uuid_a, a) = sim.mint(role(A, "PROJECT_ROLE_EDITOR")).await;
    let (_, b) = sim.mint(role(B, "PROJECT_ROLE_VIEWER")).await;

    let (status, own) = sim.call(LIST, Some(&a), json!({"project": A})).await;
    assert_eq!((status, uuids(&own)), (200, vec![MACHINE_A]), "{own}");
    let (status, own) = sim.call(LIST, Some(&b), json!({"project": B})).await;
    assert_eq!((status, uuids(&own)), (200, vec![MACHINE_B]), "{own}");

    let (status, refused) = sim.call(LIST, Some(&a), json!({"project": B})).await;
    assert_eq!(status, 403);
    assert_eq!(
        refused,
        json!({"code": "permission_denied", "message": format!(
            "access to:\"{LIST}\" with subject:\"{B}\" is not allowed because it is not part of the token permissions, allowed subjects are:[\"{A}\"]")})
    );
    let (status, hidden) = sim
        .call(GET, Some(&a), json!({"uuid": MACHINE_B, "project": A}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(
        hidden["message"],
        format!("*metal.Machine with id \"{MACHINE_B}\" not found")
    );
    let (status, anonymous) = sim.call(LIST, None, json!({"project": A})).await;
    assert_eq!(
        (status, &anonymous["code"]),
        (403, &json!("permission_denied"))
    );

    let revoke = sim
        .http
        .delete(format!("{}/sim/v2/tokens/{uuid_a}", sim.url));
    assert!(revoke.send().await.expect("revoke").status().is_success());
    let (status, revoked) = sim.call(LIST, Some(&a), json!({"project": A})).await;
    assert_eq!(
        (status, revoked),
        (
            401,
            json!({"code": "unauthenticated", "message": "token was revoked"})
        )
    );
}

#[tokio::test]
async fn a_token_expires_and_one_listing_refresh_gets_a_new_one_beside_it() {
    let sim = served(0).await;
    let mut short = role(A, "PROJECT_ROLE_VIEWER");
    short["expires"] = json!("1s");
    let (_, short) = sim.mint(short).await;
    // Expiry is checked by the second: past the next full second, the token is expired.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let (status, expired) = sim.call(LIST, Some(&short), json!({"project": A})).await;
    assert_eq!(
        (status, &expired["message"]),
        (401, &json!("token has invalid claims: token is expired"))
    );

    let mut refreshing = role(A, "PROJECT_ROLE_EDITOR");
    refreshing["permissions"] = json!([{"self": {"methods": [REFRESH]}}]);
    let (_, old) = sim.mint(refreshing).await;
    let (_, plain) = sim.mint(role(A, "PROJECT_ROLE_EDITOR")).await;
    let (status, _) = sim.call(REFRESH, Some(&plain), json!({})).await;
    assert_eq!(
        status, 403,
        "Refresh is not in a plain API token's permissions"
    );
    let (status, refreshed) = sim.call(REFRESH, Some(&old), json!({})).await;
    assert_eq!(status, 200, "{refreshed}");
    let new = refreshed["secret"].as_str().expect("secret");
    assert_eq!(refreshed["token"]["projectRoles"][A], "PROJECT_ROLE_EDITOR");
    for token in [&old, new] {
        let (status, _) = sim.call(LIST, Some(token), json!({"project": A})).await;
        assert_eq!(status, 200);
    }
}

#[tokio::test]
async fn a_token_over_its_rate_limit_is_resource_exhausted_within_the_minute() {
    let sim = served(3).await;
    let (_, token) = sim.mint(role(A, "PROJECT_ROLE_VIEWER")).await;
    let minute = || jiff::Timestamp::now().as_second().div_euclid(60);
    // A minute boundary between the calls resets the count: try again in the next minute.
    for _ in 0..3 {
        let started = minute();
        let mut statuses = Vec::new();
        for _ in 0..5 {
            statuses.push(sim.call(LIST, Some(&token), json!({"project": A})).await);
        }
        if minute() != started {
            continue;
        }
        let codes: Vec<u16> = statuses.iter().map(|(s, _)| *s).collect();
        assert_eq!(codes, [200, 200, 200, 200, 429]);
        assert_eq!(
            statuses[4].1,
            json!({"code": "resource_exhausted", "message": "you have reached the per-minute API rate limit (limit: 3)"})
        );
        return;
    }
    panic!("three minute boundaries in three tries");
}

#[tokio::test]
async fn a_size_image_constraint_refuses_try_and_create_as_invalid() {
    let sim = served(0).await;
    let mut request = role(A, "PROJECT_ROLE_EDITOR");
    request["permissions"] = json!([{"self": {"methods": [TRY]}}]);
    let (_, token) = sim.mint(request).await;
    let refusal = json!({"code": "invalid_argument", "message":
        "given size:v1-small-x86 with image:debian-13.0 does violate image constraint:debian >=14.0"});
    let pair = |image: &str| json!({"size": "v1-small-x86", "image": image});
    let (status, answer) = sim.call(TRY, Some(&token), pair("debian-13.0")).await;
    assert_eq!((status, &answer), (400, &refusal));
    let (status, answer) = sim.call(TRY, Some(&token), pair("ubuntu-26.4")).await;
    assert_eq!((status, answer), (200, json!({})));
    let (status, answer) = sim.call(TRY, Some(&token), pair("nope-1.0")).await;
    assert_eq!((status, &answer["code"]), (404, &json!("not_found")));

    let create = json!({"project": A, "name": "w", "partition": "mini-lab",
        "size": "v1-small-x86", "image": "debian-13.0",
        "networks": [{"network": "internet-mini-lab"}]});
    let (status, answer) = sim.call(CREATE, Some(&token), create).await;
    assert_eq!((status, answer), (400, refusal));
}
