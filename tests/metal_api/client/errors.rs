//! Every error path answers as metal-api does: status code and message.

use super::*;

/// A wrong HMAC key, no tenant and a viewer who wants to write are refused.
#[tokio::test]
async fn authentication_tenant_and_role_are_checked() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let wrong_key = sim.client_with_key(AuthType::Edit, "not-the-key");
    assert_eq!(
        status(wrong_key.machine("x").await),
        (403, "Wrong HMAC found".into())
    );
    let anonymous = metal_api::Client::new(metal_api::Config::new(
        url::Url::parse(&sim.url).expect("url"),
        metal_api::Auth::None,
    ))
    .expect("client");
    assert_eq!(
        status(anonymous.partitions().await),
        (403, "tenant  not allowed".into())
    );
    assert_eq!(
        anonymous
            .health()
            .await
            .expect("health needs no tenant")
            .status,
        "healthy"
    );
    let viewer = sim.client(AuthType::View);
    assert_eq!(viewer.partitions().await.expect("viewer reads").len(), 1);
    let (code, message) = status(
        viewer
            .machine_allocate(&machine_request("x", "ubuntu-26.4"))
            .await,
    );
    assert_eq!(code, 403);
    assert!(
        message.starts_with("you are not member in one of [k8s_kaas-edit"),
        "{message}"
    );
}

/// A stale X-Date and a missing one.
#[tokio::test]
async fn stale_or_missing_signature_dates_are_refused() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let http = reqwest::Client::new();
    let date = "2024-01-02T03:04:05Z";
    let sig = metal_api::hmac::signature(b"metal-edit", date, "GET", "abcdefghijklmnopqrstuvwx");
    let response = http
        .get(format!("{}/v1/machine", sim.url))
        .header("X-Date", date)
        .header("X-Data-Salt", "abcdefghijklmnopqrstuvwx")
        .header("Authorization", format!("Metal-Edit {sig}"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 403);
    let body = response.text().await.expect("body");
    assert!(
        body.starts_with("\"{\\\"statuscode\\\":403"),
        "string-wrapped error body: {body}"
    );
    assert!(
        metal_api::error::decode_error_body(body.as_bytes()).contains("too old"),
        "{body}"
    );
    let response = http
        .get(format!("{}/v1/machine", sim.url))
        .header("Authorization", "Metal-Edit 00")
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 403);
}

/// Unknown ids, in metal-api's words, and unknown paths; images resolve by prefix.
#[tokio::test]
async fn unknown_ids_and_paths_are_not_found() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let client = sim.editor();
    assert_eq!(
        status(client.machine("nope").await),
        (404, "NotFound no machine with id \"nope\" found".into())
    );
    assert_eq!(status(client.network("nope").await).0, 404);
    assert_eq!(status(client.ip("127.9.9.9").await).0, 404);
    assert_eq!(status(client.size("nope").await).0, 404);
    assert_eq!(status(client.partition("nope").await).0, 404);
    assert_eq!(
        client
            .image_latest("firewall-ubuntu-3.0")
            .await
            .expect("resolves")
            .id,
        "firewall-ubuntu-3.0"
    );
    assert_eq!(
        client
            .image_latest("capms-ubuntu-1.33")
            .await
            .expect("resolves")
            .id,
        "capms-ubuntu-1.33.5"
    );
    let http = reqwest::Client::new();
    let response = http
        .get(format!("{}/v2/nothing", sim.url))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 404);
}

/// Unknown project, no partition, an IP in use and one outside every prefix.
#[tokio::test]
async fn network_and_ip_allocations_are_refused_with_metal_apis_reasons() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let client = sim.editor();
    let bad_project = NetworkAllocateRequest {
        projectid: "unknown".into(),
        partitionid: "mini-lab".into(),
        ..Default::default()
    };
    let (code, message) = status(client.network_allocate(&bad_project).await);
    assert_eq!(code, 404);
    assert!(
        message.contains("project with id:unknown not found"),
        "{message}"
    );
    let (code, message) = status(
        client
            .network_allocate(&NetworkAllocateRequest {
                projectid: PROJECT.into(),
                ..Default::default()
            })
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (400, "partitionid should not be empty")
    );
    let internet = |ip_type: &str| IpAllocateRequest {
        networkid: "internet-mini-lab".into(),
        projectid: PROJECT.into(),
        type_: ip_type.into(),
        ..Default::default()
    };
    assert_eq!(
        status(
            client
                .ip_allocate_specific("127.100.0.142", &internet("static"))
                .await
        ),
        (409, "Conflict ip already allocated".into())
    );
    assert_eq!(
        status(
            client
                .ip_allocate_specific("127.200.0.1", &internet("static"))
                .await
        ),
        (
            422,
            "specific ip not contained in any of the defined prefixes".into()
        )
    );
}

/// Missing or empty networks, unknown or firewall images, bad keys, underlay or no private network, a taken UUID.
#[tokio::test]
async fn machine_allocations_are_refused_in_metal_apis_order() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let client = sim.editor();
    let network = private_network(&client).await;
    let mut req = machine_request(&network.id, "ubuntu-26.4");
    req.networks = None;
    assert_eq!(
        status(client.machine_allocate(&req).await),
        (400, "network ids cannot be nil".into())
    );
    req.networks = Some(vec![]);
    assert_eq!(
        status(client.machine_allocate(&req).await),
        (400, "network ids cannot be empty".into())
    );
    let (code, message) = status(
        client
            .machine_allocate(&machine_request(&network.id, "ubuntu-99.4"))
            .await,
    );
    assert_eq!(code, 400);
    assert!(
        message.contains("no image for os:ubuntu version:99.4.0 found"),
        "{message}"
    );
    let (code, message) = status(
        client
            .machine_allocate(&machine_request(&network.id, "firewall-ubuntu-3.0"))
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            400,
            "given image is not usable for a machine, features: firewall"
        )
    );
    let mut req = machine_request(&network.id, "ubuntu-26.4");
    req.ssh_pub_keys = vec!["not a key".into()];
    assert_eq!(status(client.machine_allocate(&req).await).0, 422);
    let req = machine_request("underlay-mini-lab", "ubuntu-26.4");
    assert_eq!(
        status(client.machine_allocate(&req).await),
        (
            422,
            "underlay networks are not allowed to be set explicitly: underlay-mini-lab".into()
        )
    );
    let req = machine_request("internet-mini-lab", "ubuntu-26.4");
    assert_eq!(
        status(client.machine_allocate(&req).await),
        (422, "no private network given".into())
    );
    let mut req = machine_request(&network.id, "ubuntu-26.4");
    req.uuid = Some("00000000-0000-0000-0000-000000000003".into());
    let preset = client.machine_allocate(&req).await.expect("preset uuid");
    assert_eq!(preset.id, "00000000-0000-0000-0000-000000000003");
    assert_eq!(
        status(client.machine_allocate(&req).await),
        (
            422,
            "machine \"00000000-0000-0000-0000-000000000003\" already allocated".into()
        )
    );
}

/// All six machines allocated: the seventh request finds none.
#[tokio::test]
async fn an_exhausted_partition_has_no_machine_available() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let client = sim.editor();
    let network = private_network(&client).await;
    for _ in 0..6 {
        client
            .machine_allocate(&machine_request(&network.id, "ubuntu-26.4"))
            .await
            .expect("machine");
    }
    assert_eq!(
        status(
            client
                .machine_allocate(&machine_request(&network.id, "ubuntu-26.4"))
                .await
        ),
        (422, "no machine available".into())
    );
}

/// `/sim/keys` rotates a key as metal-api restarted with a new one: the old key is refused,
/// the new one taken; an unknown auth type is refused naming the valid ones; no key answered.
#[tokio::test]
async fn a_rotated_key_refuses_the_old_one_and_takes_the_new() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let keys = format!("{}/sim/keys", sim.url.trim_end_matches('/'));
    let http = reqwest::Client::new();
    let answer = http
        .put(&keys)
        .json(&serde_json::json!({"Metal-Edit": "rotated-edit"}))
        .send()
        .await
        .expect("PUT /sim/keys");
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.expect("answer");
    assert!(
        text.contains("Metal-Edit") && !text.contains("rotated-edit"),
        "{text}"
    );
    assert_eq!(
        status(sim.editor().machine("x").await),
        (403, "Wrong HMAC found".into())
    );
    let rotated = sim.client_with_key(AuthType::Edit, "rotated-edit");
    assert!(rotated.partitions().await.is_ok(), "the new key refused");
    assert!(
        sim.client(AuthType::View).partitions().await.is_ok(),
        "another key lost"
    );
    let unknown = http
        .put(&keys)
        .json(&serde_json::json!({"Metal-Root": "x"}))
        .send()
        .await
        .expect("PUT /sim/keys");
    assert_eq!(unknown.status(), 400);
    let text = unknown.text().await.expect("answer");
    assert!(
        text.contains("Metal-View, Metal-Edit, Metal-Admin"),
        "{text}"
    );
}
