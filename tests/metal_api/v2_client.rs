//! capms's v2 client against the simulator's API v2: a project token lists and gets the
//! project's machines into the client's messages, a refreshed token is used from then on, and a
//! revoked or foreign-project token fails with the Connect code metal-apiserver answers. What
//! the client sends fits the protos.

use super::v2::{MACHINE, PROJECT, allocated, mint};
use crate::support;
use metal_sim::inventory::Inventory;
use metalstack_api::types::{Labels, MachineQuery, MachineServiceListRequest};
use metalstack_api::{Client, Code, Token};
use serde_json::json;
use support::RunningSim;
use support::protos::Protos;

/// A client of `sim`'s v2 with a token minted for `roles`, allowed to refresh itself.
async fn client_of(sim: &RunningSim, roles: serde_json::Value) -> (Client, serde_json::Value) {
    let refresh = ["/metalstack.api.v2.TokenService/Refresh"];
    let permissions = json!([{"subject": "", "methods": refresh}]);
    let minted = mint(
        sim,
        json!({"projectRoles": roles, "permissions": permissions}),
    )
    .await;
    let secret = minted["secret"].as_str().expect("a secret");
    let token = Token::parse(secret).expect("a JWT");
    let base = sim.url.trim_end_matches("/metal");
    (Client::new(base, reqwest::Client::new(), token), minted)
}

#[tokio::test]
async fn a_project_token_lists_and_gets_its_machines_and_refreshes() {
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    allocated(&sim);
    let (client, _) = client_of(&sim, json!({PROJECT: "PROJECT_ROLE_EDITOR"})).await;
    let labelled = MachineServiceListRequest {
        project: PROJECT.into(),
        query: Some(MachineQuery {
            labels: Some(Labels {
                labels: [("cluster.x-k8s.io/cluster-name".into(), "c".into())].into(),
            }),
        }),
    };
    if let Some(protos) = Protos::load() {
        let sent = serde_json::to_value(&labelled).expect("JSON");
        assert_eq!(
            protos.check("MachineServiceListRequest", &sent),
            Vec::<String>::new()
        );
    }
    let listed = client.machines(&labelled).await.expect("list");
    let ids: Vec<&str> = listed.machines.iter().map(|m| m.uuid.as_str()).collect();
    assert_eq!(ids, [MACHINE]);
    let got = client.machine(PROJECT, MACHINE).await.expect("get").machine;
    let allocation = got.allocation.expect("allocated");
    assert_eq!(allocation.project, PROJECT);
    let events = got.recent_provisioning_events.expect("events");
    assert_eq!(
        events.events[0].event,
        "MACHINE_PROVISIONING_EVENT_TYPE_PHONED_HOME"
    );
    assert_eq!(
        events.state.as_deref(),
        Some("MACHINE_PROVISIONING_EVENT_STATE_CRASHLOOP")
    );

    let before = client.token();
    let refreshed = client.refresh().await.expect("refresh");
    assert_ne!(refreshed.secret(), before.secret());
    assert_eq!(client.token(), refreshed, "used from now on");
    client
        .machine(PROJECT, MACHINE)
        .await
        .expect("the refreshed token works");
}

#[tokio::test]
async fn a_foreign_project_or_revoked_token_fails_with_metal_apiserver_s_code() {
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    allocated(&sim);
    let foreign = "00000000-0000-0000-0000-00000000000b";
    let (client, minted) = client_of(&sim, json!({foreign: "PROJECT_ROLE_EDITOR"})).await;
    let refused = client
        .machine(PROJECT, MACHINE)
        .await
        .expect_err("not its project");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused}");
    assert!(!refused.transient());
    let metalstack_api::Error::Connect { message, .. } = &refused else {
        panic!("a Connect error: {refused}")
    };
    assert!(
        !message.is_empty() && !message.contains("\"code\""),
        "the server's message, not its answer's body: {message}"
    );

    let uuid = minted["token"]["uuid"].as_str().expect("the token's uuid");
    let base = sim.url.trim_end_matches("/metal");
    let revoked = reqwest::Client::new()
        .delete(format!("{base}/sim/v2/tokens/{uuid}"))
        .send()
        .await
        .expect("revoke");
    assert!(revoked.status().is_success(), "{}", revoked.status());
    let list = MachineServiceListRequest {
        project: foreign.into(),
        query: None,
    };
    let refused = client.machines(&list).await.expect_err("revoked");
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused}");
}
