//! metal-apiserver's protos (API v2) are the contract of the simulator's v2 surface: every method
//! it serves is one of theirs, with the access their options declare, and its answers and
//! errors fit the protos' messages, fields and enum values.

use crate::support;
use metal_api::types::{MachineAllocation, MachineEvent};
use metal_sim::inventory::Inventory;
use metal_sim::v2::SERVED;
use metal_sim::v2::authorize::Access;
use metalstack_api::types::token::SELF_METHODS;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use support::RunningSim;
use support::protos::Protos;

pub(super) const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
pub(super) const MACHINE: &str = "00000000-0000-0000-0000-000000000003";
/// What a method's options say of its access, as the simulator's table would write it.
fn declared(options: &[String]) -> BTreeSet<String> {
    let kept = options
        .iter()
        .filter(|o| o.starts_with("project_roles=") || o.starts_with("visibility="));
    kept.cloned().collect()
}

fn served_access(access: Access) -> BTreeSet<String> {
    match access {
        Access::Public => ["visibility=VISIBILITY_PUBLIC".to_owned()].into(),
        Access::SelfOnly => ["visibility=VISIBILITY_SELF".to_owned()].into(),
        Access::Project(roles) => roles
            .iter()
            .map(|r| {
                let name = serde_json::to_value(r).expect("a role");
                format!("project_roles={}", name.as_str().expect("a name"))
            })
            .collect(),
    }
}

#[test]
fn every_served_v2_method_is_in_the_protos_with_the_access_they_declare() {
    let Some(protos) = Protos::load() else { return };
    assert!(protos.rpcs.len() > 50, "{} methods read", protos.rpcs.len());
    for served in SERVED {
        let rpc = protos
            .rpcs
            .get(served.procedure)
            .unwrap_or_else(|| panic!("{} is not in the protos", served.procedure));
        assert_eq!(
            served_access(served.access),
            declared(&rpc.options),
            "{}",
            served.procedure
        );
    }
}

/// A machine of the project allocated, with events, a crash loop and tags, so that every field
/// the simulator writes is there.
pub(super) fn allocated(sim: &RunningSim) {
    let mut state = sim.sim.state();
    let record = state.machines.get_mut(MACHINE).expect("a lab machine");
    record.allocation = Some(MachineAllocation {
        project: PROJECT.into(),
        name: "worker".into(),
        hostname: "worker".into(),
        creator: "capms".into(),
        allocationuuid: "00000000-0000-0000-0000-0000000000aa".into(),
        ..Default::default()
    });
    record.tags = vec!["cluster.x-k8s.io/cluster-name=c".into(), "bare".into()];
    let event = MachineEvent {
        event: "Phoned Home".into(),
        ..Default::default()
    };
    record.events = vec![event.clone()];
    record.last_event_time = Some(event.time);
    record.last_error_event = Some(event);
    record.crash_loop = true;
}

/// A token minted through `/sim/v2/tokens` with `request`: `{token, secret}`.
pub(super) async fn mint(sim: &RunningSim, request: Value) -> Value {
    sim.mint_v2(request).await
}

async fn call(sim: &RunningSim, procedure: &str, token: &str, request: Value) -> (u16, Value) {
    let base = sim.url.trim_end_matches("/metal");
    let answer = reqwest::Client::new()
        .post(format!("{base}{procedure}"))
        .bearer_auth(token)
        .json(&request)
        .send()
        .await
        .expect("call");
    let status = answer.status().as_u16();
    (status, answer.json().await.expect("json"))
}

#[tokio::test]
async fn the_simulator_s_v2_answers_fit_the_protos() {
    let Some(protos) = Protos::load() else { return };
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    allocated(&sim);
    let minted = mint(
        &sim,
        json!({"projectRoles": {PROJECT: "PROJECT_ROLE_EDITOR"},
                      "permissions": [{"self": {"methods": SELF_METHODS}}]}),
    )
    .await;
    assert_eq!(
        protos.check("TokenServiceCreateResponse", &minted),
        Vec::<String>::new()
    );
    let token = minted["secret"].as_str().expect("secret");
    let calls = [
        ("MachineService/List", json!({"project": PROJECT})),
        (
            "MachineService/Get",
            json!({"uuid": MACHINE, "project": PROJECT}),
        ),
        ("TokenService/Refresh", json!({})),
        ("PartitionService/List", json!({})),
        ("SizeService/List", json!({})),
        ("ImageService/List", json!({})),
        ("ImageService/Latest", json!({"os": "ubuntu-26.4"})),
        (
            "SizeImageConstraintService/Try",
            json!({"size": "v1-small-x86", "image": "ubuntu-26.4"}),
        ),
        ("ProjectService/Get", json!({"project": PROJECT})),
        ("HealthService/Get", json!({})),
        (
            "NetworkService/Get",
            json!({"id": "internet-mini-lab", "project": PROJECT}),
        ),
    ];
    for (method, request) in calls {
        let procedure = format!("/metalstack.api.v2.{method}");
        let rpc = &protos.rpcs[&procedure];
        assert_eq!(protos.check(&rpc.input, &request), Vec::<String>::new());
        let (status, answer) = call(&sim, &procedure, token, request).await;
        assert_eq!(status, 200, "{method}: {answer}");
        assert_eq!(
            protos.check(&rpc.output, &answer),
            Vec::<String>::new(),
            "{method}: {answer}"
        );
        let listed = ["machines", "partitions", "sizes", "images"]
            .into_iter()
            .find_map(|key| answer[key].as_array());
        if let Some(listed) = listed {
            assert!(!listed.is_empty(), "{method}: {answer}");
        }
    }
    // An error is Connect's: a code and a message.
    let (status, refused) = call(
        &sim,
        "/metalstack.api.v2.MachineService/List",
        token,
        json!({"project": "00000000-0000-0000-0000-00000000000b"}),
    )
    .await;
    assert_eq!(status, 403);
    let keys: BTreeSet<&str> = refused
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(["code", "message"]));
}

/// A machine and a firewall made through v2 on a network made through v1: both installs as a
/// v1 allocation does and are found by their allocation's labels (not by the machine's, which
/// hold a v1 allocation's tags) until phoned home; v1 sees the same machine, its rules and none of
/// those labels, as metal-api does not know them; a power cycle through the BMC reboots one; both are freed through
/// v2, each answer once its IPs are released. Every request and answer fits the protos.
#[tokio::test]
async fn machines_made_and_freed_through_v2_are_metal_api_s_machines() {
    let Some(protos) = Protos::load() else { return };
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let network = sim
        .editor()
        .network_allocate(&metal_api::types::NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            name: "v2-private".into(),
            ..Default::default()
        })
        .await
        .expect("a private network");
    let minted = mint(
        &sim,
        json!({"projectRoles": {PROJECT: "PROJECT_ROLE_EDITOR"}}),
    )
    .await;
    let token = minted["secret"].as_str().expect("secret");
    let create = "/metalstack.api.v2.MachineService/Create";
    let rules = json!({"egress": [{"protocol": "IP_PROTOCOL_TCP", "ports": [443], "to": ["0.0.0.0/0"], "comment": "https"}]});
    let requests = [
        json!({"project": PROJECT, "name": "v2-worker", "partition": "mini-lab", "size": "v1-small-x86",
               "image": "ubuntu-26.4", "networks": [{"network": network.id}],
               "labels": {"labels": {"capms.test/made": "v2"}}}),
        json!({"project": PROJECT, "name": "v2-firewall", "partition": "mini-lab", "size": "v1-small-x86",
               "image": "firewall-ubuntu-3.0", "networks": [{"network": network.id}, {"network": "internet-mini-lab"}],
               "labels": {"labels": {"capms.test/made": "v2"}},
               "allocationType": "MACHINE_ALLOCATION_TYPE_FIREWALL", "firewallSpec": {"firewallRules": rules}}),
    ];
    let mut made = Vec::new();
    for request in requests {
        assert_eq!(
            protos.check("MachineServiceCreateRequest", &request),
            Vec::<String>::new()
        );
        let (status, answer) = call(&sim, create, token, request).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            protos.check("MachineServiceCreateResponse", &answer),
            Vec::<String>::new()
        );
        made.push(answer["machine"]["uuid"].as_str().expect("uuid").to_owned());
    }
    let list = "/metalstack.api.v2.MachineService/List";
    let by_tags =
        json!({"project": PROJECT, "query": {"labels": {"labels": {"capms.test/made": "v2"}}}});
    let (_, listed) = call(&sim, list, token, by_tags).await;
    assert_eq!(listed["machines"], json!([]), "{listed}");
    let query = json!({"project": PROJECT,
                       "query": {"allocation": {"labels": {"labels": {"capms.test/made": "v2"}}}}});
    support::eventually("both phoned home", support::LOADED_MACHINE_WAIT, || async {
        let (_, listed) = call(&sim, list, token, query.clone()).await;
        let machines = listed["machines"].as_array().cloned().unwrap_or_default();
        let phoned = |m: &Value| {
            let events = m["recentProvisioningEvents"]["events"].as_array().cloned();
            events
                .unwrap_or_default()
                .iter()
                .any(|e| e["event"] == "MACHINE_PROVISIONING_EVENT_TYPE_PHONED_HOME")
        };
        (machines.len() == 2 && machines.iter().all(phoned)).then_some(())
    })
    .await;
    let firewall = sim
        .editor()
        .machine(&made[1])
        .await
        .expect("the firewall through v1");
    assert!(
        !firewall
            .tags
            .iter()
            .any(|t| t.starts_with("capms.test/made")),
        "{:?}",
        firewall.tags
    );
    let allocation = firewall.allocation.expect("allocated");
    let egress = allocation.firewall_rules.expect("rules").egress;
    assert_eq!(
        (egress[0].protocol.as_str(), egress[0].ports.as_slice()),
        ("tcp", &[443][..])
    );

    // A power cycle through the BMC: answered at once, the machine writes `Planned Reboot`.
    let bmc = "/metalstack.api.v2.MachineService/BMCCommand";
    let cycle =
        json!({"uuid": made[0], "project": PROJECT, "command": "MACHINE_BMC_COMMAND_CYCLE"});
    assert_eq!(
        protos.check("MachineServiceBMCCommandRequest", &cycle),
        Vec::<String>::new()
    );
    let (status, answer) = call(&sim, bmc, token, cycle).await;
    assert_eq!((status, &answer), (200, &json!({})));
    let get = json!({"uuid": made[0], "project": PROJECT});
    support::eventually(
        "the cycle's planned reboot",
        support::LOADED_MACHINE_WAIT,
        || async {
            let (_, got) = call(
                &sim,
                "/metalstack.api.v2.MachineService/Get",
                token,
                get.clone(),
            )
            .await;
            let events = got["machine"]["recentProvisioningEvents"]["events"]
                .as_array()
                .cloned();
            let planned = events
                .unwrap_or_default()
                .iter()
                .any(|e| e["event"] == "MACHINE_PROVISIONING_EVENT_TYPE_PLANNED_REBOOT");
            planned.then_some(())
        },
    )
    .await;
    let internal = json!({"uuid": made[0], "project": PROJECT, "command": "MACHINE_BMC_COMMAND_MACHINE_DELETED"});
    let (status, refused) = call(&sim, bmc, token, internal).await;
    assert_eq!(
        (status, &refused["code"]),
        (400, &json!("invalid_argument")),
        "{refused}"
    );

    let delete = "/metalstack.api.v2.MachineService/Delete";
    for uuid in &made {
        let request = json!({"uuid": uuid, "project": PROJECT});
        let (status, answer) = call(&sim, delete, token, request).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            protos.check("MachineServiceDeleteResponse", &answer),
            Vec::<String>::new()
        );
        // Delete answers once the free-up is done: the machine's IPs are released.
        let tag = format!("{}={uuid}", metal_api::tags::MACHINE_ID);
        let state = sim.sim.state();
        let held: Vec<&String> = state
            .ips
            .keys()
            .filter(|a| state.ips[*a].tags.contains(&tag))
            .collect();
        assert!(held.is_empty(), "IPs of {uuid} still held: {held:?}");
    }
    let (_, listed) = call(&sim, list, token, query).await;
    assert_eq!(listed["machines"], json!([]), "{listed}");
}

/// An IP made, listed and deleted (by its address) through v2; another project's token finds
/// none of it. Every request and answer fits the protos.
#[tokio::test]
async fn ips_are_made_listed_and_deleted_by_address_through_v2() {
    let Some(protos) = Protos::load() else { return };
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let mint = |project: &str| {
        let request = json!({"projectRoles": {project: "PROJECT_ROLE_EDITOR"}});
        let sim = &sim;
        async move {
            let minted = mint(sim, request).await;
            minted["secret"].as_str().expect("secret").to_owned()
        }
    };
    let token = mint(PROJECT).await;
    let procedure = |method: &str| format!("/metalstack.api.v2.IPService/{method}");
    let create = json!({"network": "internet-mini-lab", "project": PROJECT, "name": "v2-ip",
                        "type": "IP_TYPE_STATIC", "labels": {"labels": {"capms.test/made": "v2"}}});
    assert_eq!(
        protos.check("IPServiceCreateRequest", &create),
        Vec::<String>::new()
    );
    let (status, made) = call(&sim, &procedure("Create"), &token, create).await;
    assert_eq!(status, 200, "{made}");
    assert_eq!(
        protos.check("IPServiceCreateResponse", &made),
        Vec::<String>::new()
    );
    assert_eq!(made["ip"]["type"], "IP_TYPE_STATIC");
    let address = made["ip"]["ip"].as_str().expect("an address").to_owned();

    let query =
        json!({"project": PROJECT, "query": {"labels": {"labels": {"capms.test/made": "v2"}}}});
    let (status, listed) = call(&sim, &procedure("List"), &token, query.clone()).await;
    assert_eq!(
        (status, listed["ips"][0]["ip"].as_str()),
        (200, Some(address.as_str())),
        "{listed}"
    );
    assert_eq!(
        protos.check("IPServiceListResponse", &listed),
        Vec::<String>::new()
    );
    let other = "00000000-0000-0000-0000-00000000000b";
    let theirs = json!({"project": other, "query": {}});
    let (status, none) = call(&sim, &procedure("List"), &mint(other).await, theirs.clone()).await;
    assert_eq!((status, &none["ips"]), (200, &json!([])), "{none}");
    let (status, _) = call(&sim, &procedure("List"), &token, theirs).await;
    assert_eq!(
        status, 403,
        "another project's IPs with this project's token"
    );

    let delete = json!({"ip": address, "project": PROJECT});
    let (status, deleted) = call(&sim, &procedure("Delete"), &token, delete).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(
        protos.check("IPServiceDeleteResponse", &deleted),
        Vec::<String>::new()
    );
    let (_, listed) = call(&sim, &procedure("List"), &token, query).await;
    assert_eq!(listed["ips"], json!([]), "{listed}");
}

/// A project's child network made, listed and deleted through v2, beside the base networks any
/// project may use. Every request and answer fits the protos.
#[tokio::test]
async fn networks_are_made_listed_and_deleted_through_v2() {
    let Some(protos) = Protos::load() else { return };
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let minted = mint(
        &sim,
        json!({"projectRoles": {PROJECT: "PROJECT_ROLE_EDITOR"}}),
    )
    .await;
    let token = minted["secret"].as_str().expect("secret");
    let procedure = |method: &str| format!("/metalstack.api.v2.NetworkService/{method}");
    let exchanges = [
        (
            "Create",
            json!({"project": PROJECT, "partition": "mini-lab", "name": "v2-private",
                          "labels": {"labels": {"capms.test/made": "v2"}}, "length": {"ipv4": 24}}),
        ),
        (
            "List",
            json!({"project": PROJECT, "query": {"name": "v2-private"}}),
        ),
        ("ListBaseNetworks", json!({"project": PROJECT, "query": {}})),
    ];
    let mut answers = Vec::new();
    for (method, request) in exchanges {
        let rpc = &protos.rpcs[&procedure(method)];
        assert_eq!(protos.check(&rpc.input, &request), Vec::<String>::new());
        let (status, answer) = call(&sim, &procedure(method), token, request).await;
        assert_eq!(status, 200, "{method}: {answer}");
        assert_eq!(
            protos.check(&rpc.output, &answer),
            Vec::<String>::new(),
            "{method}: {answer}"
        );
        answers.push(answer);
    }
    let made = &answers[0]["network"];
    assert_eq!(made["type"], "NETWORK_TYPE_CHILD", "{made}");
    assert!(
        made["prefixes"][0]
            .as_str()
            .is_some_and(|p| p.ends_with("/24")),
        "{made}"
    );
    assert_eq!(answers[1]["networks"][0]["id"], made["id"]);
    let bases = answers[2]["networks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        bases.iter().any(|n| n["id"] == "internet-mini-lab"),
        "{bases:?}"
    );
    assert!(
        bases.iter().all(|n| n.get("project").is_none()),
        "{bases:?}"
    );

    let delete = json!({"id": made["id"], "project": PROJECT});
    let (status, deleted) = call(&sim, &procedure("Delete"), token, delete).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(
        protos.check("NetworkServiceDeleteResponse", &deleted),
        Vec::<String>::new()
    );
    let query = json!({"project": PROJECT, "query": {"name": "v2-private"}});
    let (_, listed) = call(&sim, &procedure("List"), token, query).await;
    assert_eq!(listed["networks"], json!([]), "{listed}");
}
