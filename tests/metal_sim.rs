//! The metal-api client against the simulator over loopback: the whole life of networks, IPs,
//! machines and firewalls, every error path, and the fault switches.

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

mod support;

use capms::metal::error::Category;
use capms::metal::hmac::AuthType;
use capms::metal::types::*;
use capms::sim::inventory::Inventory;
use std::time::Duration;
use support::{RunningSim, eventually};

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKv3u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7u7 capms@test";

fn machine_request(network: &str, image: &str) -> MachineAllocateRequest {
    MachineAllocateRequest {
        name: "worker-0".into(),
        hostname: "worker-0".into(),
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        sizeid: "v1-small-x86".into(),
        imageid: image.into(),
        networks: Some(vec![AllocationNetwork {
            networkid: network.into(),
            autoacquire: None,
        }]),
        ssh_pub_keys: vec![SSH_KEY.into()],
        user_data: "#cloud-config\nhostname: worker-0\n".into(),
        tags: vec![
            "capms.test/owner=default.worker-0".into(),
            "machine.metal-stack.io/rack=user-override".into(),
        ],
        ..Default::default()
    }
}

async fn wait_for_event(client: &capms::metal::Client, id: &str, event: &'static str) -> Machine {
    eventually(
        &format!("machine {id} to reach {event}"),
        Duration::from_secs(15),
        || async {
            let m = client.machine(id).await.ok()?;
            (m.last_event() == Some(event)).then_some(m)
        },
    )
    .await
}

fn status(result: Result<impl std::fmt::Debug, capms::metal::Error>) -> (u16, String) {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => (
            e.status().unwrap_or(0),
            e.api_message().unwrap_or_default().to_owned(),
        ),
    }
}

#[tokio::test]
async fn allocate_observe_and_free_everything() {
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let client = sim.editor();

    // The private network of a cluster, carved from the partition's super network.
    let network = client
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            name: "cluster-a".into(),
            labels: [(
                "capms.test/owner".to_owned(),
                "default.cluster-a".to_owned(),
            )]
            .into(),
            ..Default::default()
        })
        .await
        .expect("network allocated");
    assert_eq!(network.prefixes, ["127.16.0.0/22"]);
    assert_eq!(
        network.parentnetworkid.as_deref(),
        Some("tenant-super-network-mini-lab")
    );
    assert!(network.vrf.is_some());
    let found = client
        .network_find(&NetworkFindRequest {
            labels: Some(
                [(
                    "capms.test/owner".to_owned(),
                    "default.cluster-a".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        })
        .await
        .expect("find by label");
    assert_eq!(
        found.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(),
        [network.id.as_str()]
    );

    // A control-plane IP from the internet network, and a specific static one.
    let cp_ip = client
        .ip_allocate(&IpAllocateRequest {
            networkid: "internet-mini-lab".into(),
            projectid: PROJECT.into(),
            type_: IP_TYPE_EPHEMERAL.into(),
            name: "cluster-a-control-plane".into(),
            tags: vec!["capms.test/owner=default.cluster-a".into()],
            ..Default::default()
        })
        .await
        .expect("ip allocated");
    assert_eq!(cp_ip.ipaddress, "127.100.0.1");
    let static_ip = client
        .ip_allocate_specific(
            "127.100.0.50",
            &IpAllocateRequest {
                networkid: "internet-mini-lab".into(),
                projectid: PROJECT.into(),
                type_: IP_TYPE_STATIC.into(),
                ..Default::default()
            },
        )
        .await
        .expect("specific ip");
    assert_eq!(
        (static_ip.ipaddress.as_str(), static_ip.type_.as_str()),
        ("127.100.0.50", "static")
    );

    // A worker: image name resolution, auto-acquired private IP, system tags.
    let machine = client
        .machine_allocate(&machine_request(&network.id, "ubuntu-26.4"))
        .await
        .expect("machine allocated");
    let allocation = machine.allocation.clone().expect("allocation");
    assert_eq!(
        allocation.image.as_ref().map(|i| i.id.as_str()),
        Some("ubuntu-26.4")
    );
    assert_eq!(allocation.creator, "metal-edit@metal-stack.io");
    assert_eq!(
        allocation.user_data, "#cloud-config\nhostname: worker-0\n",
        "user data stored verbatim"
    );
    assert!(!allocation.succeeded, "metal-api never sets succeeded");
    let private = &allocation.networks[0];
    assert_eq!(
        (private.networktype.as_str(), private.ips.as_slice()),
        ("privateprimaryunshared", &["127.16.0.1".to_owned()][..])
    );
    assert!(private.asn > 4_210_000_000);
    assert!(machine.tags.contains(&format!(
        "machine.metal-stack.io/network.primary.asn={}",
        private.asn
    )));
    assert!(
        machine
            .tags
            .contains(&format!("machine.metal-stack.io/rack={}", machine.rackid)),
        "system tags override user tags"
    );
    assert!(
        machine
            .tags
            .contains(&"capms.test/owner=default.worker-0".to_owned())
    );
    let auto_ip = client.ip("127.16.0.1").await.expect("auto-acquired ip");
    assert_eq!(
        auto_ip.tags,
        [format!("machine.metal-stack.io/id={}", machine.id)]
    );
    assert_eq!(auto_ip.description, "autoassigned");
    let by_tag = client
        .machine_find(&MachineFindRequest {
            tags: vec!["capms.test/owner=default.worker-0".into()],
            ..Default::default()
        })
        .await
        .expect("find by tag");
    assert_eq!(by_tag.len(), 1);

    // A firewall in the internet and the private network; the underlay comes on its own.
    let rules = FirewallRules {
        egress: vec![FirewallEgressRule {
            protocol: "TCP".into(),
            ports: vec![443],
            to: vec!["0.0.0.0/0".into()],
            comment: "allow https".into(),
        }],
        ingress: vec![],
    };
    let mut fw_req = machine_request(&network.id, "firewall-ubuntu-3.0");
    fw_req.name = "cluster-a-firewall".into();
    fw_req.networks = Some(vec![
        AllocationNetwork {
            networkid: "internet-mini-lab".into(),
            autoacquire: Some(true),
        },
        AllocationNetwork {
            networkid: network.id.clone(),
            autoacquire: Some(true),
        },
    ]);
    let firewall = client
        .firewall_allocate(&FirewallCreateRequest {
            machine: fw_req,
            firewall_rules: Some(rules),
        })
        .await
        .expect("firewall allocated");
    let fw_alloc = firewall.allocation.clone().expect("allocation");
    assert_eq!(fw_alloc.role, "firewall");
    let kinds: Vec<_> = fw_alloc
        .networks
        .iter()
        .map(|n| n.networktype.as_str())
        .collect();
    assert_eq!(kinds, ["privateprimaryunshared", "external", "underlay"]);
    assert_eq!(
        fw_alloc.firewall_rules.expect("rules").egress[0].protocol,
        "tcp",
        "protocols lower-cased"
    );
    assert_ne!(firewall.id, machine.id);
    assert_eq!(
        client
            .firewall(&firewall.id)
            .await
            .expect("firewall get")
            .id,
        firewall.id
    );
    assert_eq!(
        status(client.firewall(&machine.id).await),
        (404, "machine is not a firewall".into())
    );
    assert_eq!(
        client
            .firewall_find(&MachineFindRequest::default())
            .await
            .expect("find")
            .len(),
        1
    );

    // The lifecycle runs on timers to Phoned Home.
    let ready = wait_for_event(&client, &machine.id, event::PHONED_HOME).await;
    let events: Vec<_> = ready.events.log.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        &events[..4],
        ["Phoned Home", "Booting New Kernel", "Installing", "Waiting"]
    );
    assert_eq!(ready.liveliness, "Alive");
    wait_for_event(&client, &firewall.id, event::PHONED_HOME).await;

    // Refusals while things are in use.
    let (code, message) = status(client.network_free(&network.id).await);
    assert_eq!(code, 422);
    assert!(
        message.contains("has ips, delete prefix not possible"),
        "{message}"
    );
    assert_eq!(
        status(client.ip_free("127.16.0.1").await),
        (400, "ip with machine scope can not be deleted".into())
    );

    // Free the machines: allocation gone at once, IPs released after a while, back to Waiting.
    let freed = client
        .machine_free(&machine.id)
        .await
        .expect("machine freed");
    assert!(freed.allocation.is_none() && freed.tags.is_empty());
    client
        .machine_free(&firewall.id)
        .await
        .expect("firewall freed");
    client
        .machine_free(&firewall.id)
        .await
        .expect("freeing a free machine is fine");
    for id in [&machine.id, &firewall.id] {
        let back = wait_for_event(&client, id, event::WAITING).await;
        let events: Vec<_> = back.events.log.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(
            &events[..5],
            [
                "Waiting",
                "Registering",
                "Preparing",
                "PXE Booting",
                "Machine Reclaim"
            ]
        );
    }
    let left = client
        .ip_find(&IpFindRequest {
            machineid: Some(machine.id.clone()),
            ..Default::default()
        })
        .await
        .expect("find");
    assert!(
        left.is_empty(),
        "ephemeral machine IPs are released: {left:?}"
    );
    assert_eq!(
        client.ip("127.16.0.1").await.map_err(|e| e.status()).err(),
        Some(Some(404))
    );

    // Now the network and the IPs can go, and everything is as it was.
    let freed_net = client
        .network_free(&network.id)
        .await
        .expect("network freed");
    assert_eq!(freed_net.id, network.id);
    assert_eq!(
        status(client.network_free(&network.id).await).0,
        404,
        "a second free is a 404"
    );
    client.ip_free(&cp_ip.ipaddress).await.expect("cp ip freed");
    client
        .ip_free(&static_ip.ipaddress)
        .await
        .expect("static ip freed");
    let super_net = client
        .network("tenant-super-network-mini-lab")
        .await
        .expect("super");
    assert_eq!(
        super_net.consumption.ipv4.expect("v4").used_prefixes,
        0,
        "child prefix released"
    );
    let internet = client.network("internet-mini-lab").await.expect("internet");
    assert_eq!(
        internet.consumption.ipv4.expect("v4").used_ips,
        1,
        "only the inventory's pre-reserved IP remains"
    );
    let again = client
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            ..Default::default()
        })
        .await
        .expect("again");
    assert_eq!(
        again.prefixes,
        ["127.16.0.0/22"],
        "the released prefix is handed out again"
    );
}

#[tokio::test]
async fn error_paths_answer_like_metal_api() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let client = sim.editor();

    // Authentication, tenant and role filters.
    let wrong_key = {
        let auth = capms::metal::Auth::Hmac {
            key: "not-the-key".into(),
            auth_type: AuthType::Edit,
        };
        capms::metal::Client::new(capms::metal::Config::new(
            url::Url::parse(&sim.url).expect("url"),
            auth,
        ))
        .expect("client")
    };
    assert_eq!(
        status(wrong_key.machine("x").await),
        (403, "Wrong HMAC found".into())
    );
    let anonymous = capms::metal::Client::new(capms::metal::Config::new(
        url::Url::parse(&sim.url).expect("url"),
        capms::metal::Auth::None,
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

    // A stale X-Date and a missing one.
    let http = reqwest::Client::new();
    let date = "2024-01-02T03:04:05Z";
    let sig = capms::metal::hmac::signature(b"metal-edit", date, "GET", "abcdefghijklmnopqrstuvwx");
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
        capms::metal::error::decode_error_body(body.as_bytes()).contains("too old"),
        "{body}"
    );
    let response = http
        .get(format!("{}/v1/machine", sim.url))
        .header("Authorization", "Metal-Edit 00")
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 403);

    // Not found, in metal-api's words.
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

    // Network and IP allocation refusals.
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

    // Machine allocation refusals, in metal-api's order.
    let network = client
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            ..Default::default()
        })
        .await
        .expect("network");
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

    // Exhaust the partition: 5 more machines, then none is available.
    for _ in 0..5 {
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

    // Unknown paths and methods.
    let response = http
        .get(format!("{}/v2/nothing", sim.url))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn faults_switch_on_and_off_at_run_time() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let client = sim.editor();
    let http = reqwest::Client::new();
    let faults_url = format!("{}/sim/faults", sim.url);
    let set = |faults: serde_json::Value| {
        let http = http.clone();
        let url = faults_url.clone();
        async move {
            let response = http
                .put(&url)
                .json(&faults)
                .send()
                .await
                .expect("faults endpoint");
            assert!(
                response.status().is_success(),
                "{}",
                response.text().await.unwrap_or_default()
            );
        }
    };

    // Every answer a 503: reads are retried, then the error is transient and says so.
    set(serde_json::json!({"error_rate": 1.0})).await;
    let err = client.partitions().await.expect_err("503");
    assert_eq!(
        (err.status(), err.is_transient(), err.category().label()),
        (Some(503), true, "metal_server_error")
    );
    set(serde_json::json!({})).await;
    assert!(client.partitions().await.is_ok());

    // Latency beyond the client's timeout.
    set(serde_json::json!({"latency_ms": 1500})).await;
    let mut config = capms::metal::Config::new(
        url::Url::parse(&sim.url).expect("url"),
        capms::metal::Auth::Hmac {
            key: "metal-edit".into(),
            auth_type: AuthType::Edit,
        },
    );
    config.timeout = Duration::from_millis(300);
    config.read_attempts = 1;
    let impatient = capms::metal::Client::new(config).expect("client");
    let err = impatient.partitions().await.expect_err("timeout");
    assert_eq!(err.category(), Category::Timeout, "{err}");
    set(serde_json::json!({})).await;

    // Dropped connections: a fresh client cannot get an answer.
    set(serde_json::json!({"drop_rate": 1.0})).await;
    let fresh = sim.editor();
    let err = fresh.partitions().await.expect_err("dropped");
    assert_eq!(err.category(), Category::Unreachable, "{err}");
    set(serde_json::json!({})).await;
    assert!(sim.editor().partitions().await.is_ok());

    // A machine that never phones home, and one that crash-loops; both recover once cleared.
    let network = client
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            ..Default::default()
        })
        .await
        .expect("network");
    let mut stuck_req = machine_request(&network.id, "ubuntu-26.4");
    stuck_req.uuid = Some("00000000-0000-0000-0000-000000000001".into());
    let mut looping_req = machine_request(&network.id, "ubuntu-26.4");
    looping_req.uuid = Some("00000000-0000-0000-0000-000000000002".into());
    set(serde_json::json!({
        "never_phone_home": ["00000000-0000-0000-0000-000000000001"],
        "crash_loop": ["00000000-0000-0000-0000-000000000002"]
    }))
    .await;
    let stuck = client
        .machine_allocate(&stuck_req)
        .await
        .expect("allocated");
    let looping = client
        .machine_allocate(&looping_req)
        .await
        .expect("allocated");
    wait_for_event(&client, &stuck.id, event::BOOTING_NEW_KERNEL).await;
    let crashing = eventually("a crash loop", Duration::from_secs(10), || async {
        let m = client.machine(&looping.id).await.ok()?;
        m.events.crash_loop.then_some(m)
    })
    .await;
    assert!(
        crashing
            .events
            .last_error_event
            .expect("error event")
            .message
            .starts_with("[unexpectedly received in")
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        client.machine(&stuck.id).await.expect("get").last_event(),
        Some(event::BOOTING_NEW_KERNEL)
    );
    set(serde_json::json!({"dead": ["00000000-0000-0000-0000-000000000001"]})).await;
    let recovered = wait_for_event(&client, &looping.id, event::PHONED_HOME).await;
    assert!(
        !recovered.events.crash_loop,
        "Phoned Home clears the crash loop"
    );
    let phoned = wait_for_event(&client, &stuck.id, event::PHONED_HOME).await;
    assert_eq!(
        phoned.liveliness, "Unknown",
        "a dead, allocated machine's liveliness is Unknown"
    );
}
