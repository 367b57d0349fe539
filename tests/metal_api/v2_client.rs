//! capms's v2 client against the simulator's API v2: a project token lists and gets the
//! project's machines into the client's messages, a refreshed token is used from then on, and a
//! revoked or foreign-project token fails with the Connect code metal-apiserver answers. A
//! cluster's network, IP, machine and firewall are made, found, power-cycled and freed through
//! the client's calls. The client keeps within its budget of calls per minute and pauses after
//! the server refuses one for the token's rate. (What it sends and reads is checked against the
//! protos in `v2_contract`.)

use super::v2::{MACHINE, PROJECT, allocated, mint};
use crate::support;
use metal_sim::inventory::Inventory;
use metalstack_api::types::Labels;
use metalstack_api::types::machine::{
    MachineProvisioningEventState, MachineProvisioningEventType, MachineQuery,
    MachineServiceListRequest,
};
use metalstack_api::{Client, Code, Token};
use serde_json::json;
use support::RunningSim;

/// A client of `sim`'s v2 with a token minted for `roles` and the methods capms calls.
async fn client_of(sim: &RunningSim, roles: serde_json::Value) -> (Client, serde_json::Value) {
    let permissions = json!([{"self": {"methods": metalstack_api::types::token::SELF_METHODS}}]);
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
            labels: Some(Labels::of([("cluster.x-k8s.io/cluster-name", "c")])),
            allocation: None,
        }),
    };
    let listed = client.machines(&labelled).await.expect("list");
    let ids: Vec<&str> = listed.iter().map(|m| m.uuid.as_str()).collect();
    assert_eq!(ids, [MACHINE]);
    let got = client.machine(PROJECT, MACHINE).await.expect("get");
    let allocation = got.allocation.expect("allocated");
    assert_eq!(allocation.project, PROJECT);
    let events = got.recent_provisioning_events.expect("events");
    assert_eq!(
        events.events[0].event,
        MachineProvisioningEventType::PhonedHome
    );
    assert!(events.phoned_home());
    assert_eq!(events.state, MachineProvisioningEventState::Crashloop);

    let before = client.token();
    let now = jiff::Timestamp::now();
    let not_due = client.refresh_if_due(now).await.expect("not due");
    assert_eq!(not_due, None, "8 h left of 8 h");
    let late = now + jiff::SignedDuration::from_hours(7);
    let refreshed = client.refresh_if_due(late).await.expect("refresh");
    let refreshed = refreshed.expect("due with 1 h of 8 h left");
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
    sim.revoke_v2(uuid).await;
    let list = MachineServiceListRequest {
        project: foreign.into(),
        ..Default::default()
    };
    let refused = client.machines(&list).await.expect_err("revoked");
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused}");
}

/// A cluster's resources through the client's calls, as capms makes them: a private network (a
/// child of the partition's super network), a static IP on the internet, a machine and a
/// firewall with its rules, found by their allocation's labels until phoned home; the catalog
/// resolves an OS version and accepts the size and image; a power cycle; then everything is
/// freed and nothing of it is found.
#[tokio::test]
async fn a_cluster_s_network_ip_machine_and_firewall_are_made_found_and_freed() {
    use metalstack_api::types::machine::{
        FirewallEgressRule, FirewallRules, FirewallSpec, IPProtocol, MachineAllocationNetwork,
        MachineAllocationQuery, MachineAllocationType, MachineBMCCommand,
        MachineServiceCreateRequest,
    };
    use metalstack_api::types::network::{
        ChildPrefixLength, IPServiceCreateRequest, IPServiceListRequest, IPType,
        NetworkServiceCreateRequest, NetworkServiceListBaseNetworksRequest, NetworkType,
    };
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let (client, _) = client_of(&sim, json!({PROJECT: "PROJECT_ROLE_EDITOR"})).await;
    let owner = Labels::of([("cluster.x-k8s.io/cluster-name", "v2")]);

    let bases = client
        .base_networks(&NetworkServiceListBaseNetworksRequest {
            project: PROJECT.into(),
            query: None,
        })
        .await
        .expect("base networks");
    let internet = bases
        .iter()
        .find(|n| n.type_ == NetworkType::External)
        .expect("an external network");
    let network = client
        .create_network(&NetworkServiceCreateRequest {
            project: PROJECT.into(),
            name: Some("v2-private".into()),
            partition: Some("mini-lab".into()),
            labels: Some(owner.clone()),
            length: Some(ChildPrefixLength {
                ipv4: Some(24),
                ipv6: None,
            }),
            ..Default::default()
        })
        .await
        .expect("a private network");
    assert_eq!(network.type_, NetworkType::Child);
    let ip = client
        .create_ip(&IPServiceCreateRequest {
            network: internet.id.clone(),
            project: PROJECT.into(),
            name: Some("v2-endpoint".into()),
            labels: Some(owner.clone()),
            type_: Some(IPType::Static),
            ..Default::default()
        })
        .await
        .expect("an IP");
    assert_eq!(ip.type_, IPType::Static);

    let image = client.latest_image("ubuntu-26.4").await.expect("latest");
    assert!(image.id.starts_with("ubuntu-26.4"), "{}", image.id);
    client
        .try_size_image("v1-small-x86", &image.id)
        .await
        .expect("the size takes the image");
    let refused = client
        .try_size_image("v1-small-x86", "windows-95")
        .await
        .expect_err("no such image");
    assert_eq!(refused.code(), Code::NotFound, "{refused}");

    let networks = |extra: Option<&str>| {
        let mut all = vec![MachineAllocationNetwork {
            network: network.id.clone(),
            ips: Vec::new(),
        }];
        all.extend(extra.map(|n| MachineAllocationNetwork {
            network: n.to_owned(),
            ips: Vec::new(),
        }));
        all
    };
    let worker = MachineServiceCreateRequest {
        project: PROJECT.into(),
        name: "v2-worker".into(),
        partition: "mini-lab".into(),
        size: "v1-small-x86".into(),
        image: image.id.clone(),
        labels: Some(owner.clone()),
        networks: networks(None),
        allocation_type: MachineAllocationType::Machine,
        ..Default::default()
    };
    let rules = FirewallRules {
        egress: vec![FirewallEgressRule {
            protocol: IPProtocol::Tcp,
            ports: vec![443],
            to: vec!["0.0.0.0/0".into()],
            comment: "https".into(),
        }],
        ingress: Vec::new(),
    };
    let firewall = MachineServiceCreateRequest {
        name: "v2-firewall".into(),
        image: "firewall-ubuntu-3.0".into(),
        networks: networks(Some(&internet.id)),
        allocation_type: MachineAllocationType::Firewall,
        firewall_spec: Some(FirewallSpec {
            firewall_rules: Some(rules.clone()),
        }),
        ..worker.clone()
    };
    let mut made = Vec::new();
    for request in [&worker, &firewall] {
        made.push(client.create_machine(request).await.expect("made").uuid);
    }

    let owned = MachineServiceListRequest {
        project: PROJECT.into(),
        query: Some(MachineQuery {
            labels: None,
            allocation: Some(MachineAllocationQuery {
                labels: Some(owner.clone()),
            }),
        }),
    };
    let found = support::eventually("both phoned home", support::LOADED_MACHINE_WAIT, || async {
        let found = client.machines(&owned).await.expect("listed");
        let phoned = |m: &metalstack_api::types::machine::Machine| {
            m.recent_provisioning_events
                .as_ref()
                .is_some_and(|e| e.phoned_home())
        };
        (found.len() == 2 && found.iter().all(phoned)).then_some(found)
    })
    .await;
    let allocated = found
        .iter()
        .find(|m| m.uuid == made[1])
        .and_then(|m| m.allocation.clone())
        .expect("the firewall");
    assert_eq!(allocated.allocation_type, MachineAllocationType::Firewall);
    assert_eq!(allocated.firewall_rules, Some(rules));
    for (id, type_) in [
        (&network.id, NetworkType::Child),
        (&internet.id, NetworkType::External),
    ] {
        let joined = allocated.networks.iter().find(|n| &n.network == id);
        assert!(
            joined.is_some_and(|n| n.network_type == type_ && n.ips.len() == 1),
            "an address in {id}: {:?}",
            allocated.networks
        );
    }
    client
        .bmc_command(PROJECT, &made[0], MachineBMCCommand::Cycle)
        .await
        .expect("a power cycle");

    for uuid in &made {
        client.delete_machine(PROJECT, uuid).await.expect("freed");
    }
    client.delete_ip(PROJECT, &ip.ip).await.expect("IP freed");
    client
        .delete_network(PROJECT, &network.id)
        .await
        .expect("network freed");
    assert_eq!(client.machines(&owned).await.expect("listed"), []);
    let ips = IPServiceListRequest {
        project: PROJECT.into(),
        query: None,
    };
    let left = client.ips(&ips).await.expect("listed");
    assert!(left.iter().all(|i| i.ip != ip.ip), "{left:?}");
}

/// Waits, when the minute is about to turn, until it has: the simulator counts calls per minute
/// of the clock, and a count cut in two would let more through.
async fn a_fresh_minute() {
    let second = jiff::Timestamp::now().as_second().rem_euclid(60);
    if second >= 45 {
        // sleep-ok: at most 15 s, once, to start the count at a minute's beginning.
        tokio::time::sleep(std::time::Duration::from_secs((61 - second) as u64)).await;
    }
}

/// The client sends no call past its budget of calls per minute, but for a token refresh; when
/// the server refuses one for the token's rate anyway, the next calls are not sent until a pause
/// is over.
#[tokio::test]
async fn the_client_keeps_within_its_budget_and_pauses_after_a_refusal() {
    let list = MachineServiceListRequest {
        project: PROJECT.into(),
        ..Default::default()
    };
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let (client, _) = client_of(&sim, json!({PROJECT: "PROJECT_ROLE_VIEWER"})).await;
    let client = client.with_calls_per_minute(2);
    a_fresh_minute().await;
    for _ in 0..2 {
        client.machines(&list).await.expect("within the budget");
    }
    let held = client.machines(&list).await.expect_err("over the budget");
    assert!(
        matches!(held, metalstack_api::Error::Budget { .. }),
        "not sent: {held}"
    );
    assert_eq!(held.code(), Code::ResourceExhausted);
    assert!(held.transient());
    let wait = held.retry_after().expect("a wait");
    assert!(wait.as_secs() > 30 && wait.as_secs() <= 60, "{wait:?}");
    // The same words each time (the wait is retry_after's): they end in conditions.
    let again = client.machines(&list).await.expect_err("over the budget");
    assert_eq!(again.to_string(), held.to_string());
    // A refresh is sent all the same: a token whose calls wait must not expire meanwhile.
    let before = client.token();
    let refreshed = client
        .refresh()
        .await
        .expect("a refresh outside the budget");
    assert_ne!(refreshed.secret(), before.secret());

    // A server whose limit is lower than the client's budget (3 a minute: 4 pass).
    let config = metal_sim::SimConfig {
        rate_limit: 3,
        ..(*sim.sim.config).clone()
    };
    let strict = RunningSim::start_configured(Inventory::default_lab(), config).await;
    let (client, _) = client_of(&strict, json!({PROJECT: "PROJECT_ROLE_VIEWER"})).await;
    a_fresh_minute().await;
    for _ in 0..4 {
        client
            .machines(&list)
            .await
            .expect("within the server's limit");
    }
    let refused = client.machines(&list).await.expect_err("over the limit");
    assert!(
        matches!(
            refused,
            metalstack_api::Error::Connect {
                code: Code::ResourceExhausted,
                ..
            }
        ),
        "the server's refusal: {refused}"
    );
    let paused = client.machines(&list).await.expect_err("paused");
    assert!(
        matches!(paused, metalstack_api::Error::Budget { .. }),
        "not sent: {paused}"
    );
    let wait = paused.retry_after().expect("a wait");
    assert!(wait.as_secs() <= 5, "the first pause is short: {wait:?}");
}
