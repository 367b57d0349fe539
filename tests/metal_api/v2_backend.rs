//! metal-api's client made for metal-apiserver (API v2, a project token) against the
//! simulator: a cluster's network, endpoint IP, worker and firewall are allocated with metal-api's
//! requests, found by their tags until the worker is ready, power-cycled and freed, every answer
//! in metal-api's model; the catalog reads through v2; a machine allocated through v1 is found by
//! its tags through v2 (a cluster whose credentials move keeps its machines); what a project
//! token cannot do through v2 is refused as a request, never asked again.

use super::v2::PROJECT;
use crate::support;
use metal_api::types::*;
use metal_api::{Auth, Catalog, Client, Config, MachineSummary};
use metal_sim::inventory::Inventory;
use support::RunningSim;

/// A metal-api client of `sim` through API v2, with an editor token of the project.
async fn v2_client(sim: &RunningSim) -> Client {
    let minted = sim.mint_capms_token(PROJECT, None).await;
    let token = minted["secret"].as_str().expect("a token").to_owned();
    let root = url::Url::parse(sim.url.trim_end_matches("/metal")).expect("a URL");
    let mut config = Config::new(root, Auth::Bearer(token));
    config.v2_project = Some(PROJECT.into());
    let client = Client::new(config).expect("a client");
    assert!(client.is_v2());
    client
}

const CLUSTER: &str = "cluster.metal-stack.io/id=default.v2";

#[tokio::test]
async fn a_cluster_is_allocated_found_and_freed_with_metal_api_s_requests_through_v2() {
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let client = v2_client(&sim).await;
    client.health().await.expect("healthy");
    let network = client
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            name: "v2".into(),
            labels: [("cluster.metal-stack.io/id".into(), "default.v2".into())].into(),
            ..Default::default()
        })
        .await
        .expect("a private network");
    assert_eq!(network.networktype, "child");
    let find = NetworkFindRequest {
        labels: Some(network.labels.clone()),
        ..Default::default()
    };
    let found = client.network_find(&find).await.expect("found");
    assert_eq!(
        found.iter().map(|n| &n.id).collect::<Vec<_>>(),
        [&network.id]
    );
    let all = client.networks().await.expect("networks");
    let external = networks_default_external(&all);
    let endpoint = client
        .ip_allocate(&IpAllocateRequest {
            networkid: external.clone(),
            projectid: PROJECT.into(),
            type_: "ephemeral".into(),
            tags: vec![CLUSTER.into()],
            ..Default::default()
        })
        .await
        .expect("an endpoint IP");
    let by_tag = IpFindRequest {
        tags: vec![CLUSTER.into()],
        ..Default::default()
    };
    let ips = client.ip_find(&by_tag).await.expect("IPs");
    assert_eq!(
        ips.iter().map(|i| &i.ipaddress).collect::<Vec<_>>(),
        [&endpoint.ipaddress]
    );

    let worker = MachineAllocateRequest {
        name: "worker-0".into(),
        hostname: "worker-0".into(),
        projectid: PROJECT.into(),
        partitionid: "mini-lab".into(),
        sizeid: "v1-small-x86".into(),
        imageid: "ubuntu-26.4".into(),
        networks: Some(vec![AllocationNetwork {
            networkid: network.id.clone(),
            autoacquire: Some(true),
        }]),
        user_data: "#cloud-config\nhostname: worker-0\n".into(),
        tags: vec![CLUSTER.into(), "capms.test/owner=worker-0".into()],
        ..Default::default()
    };
    let allocated = client.machine_allocate(&worker).await.expect("a worker");
    let firewall = FirewallCreateRequest {
        machine: MachineAllocateRequest {
            name: "firewall".into(),
            imageid: "firewall-ubuntu-3.0".into(),
            networks: Some(vec![
                AllocationNetwork {
                    networkid: network.id.clone(),
                    autoacquire: Some(true),
                },
                AllocationNetwork {
                    networkid: external.clone(),
                    autoacquire: Some(true),
                },
            ]),
            tags: vec![CLUSTER.into(), "capms.test/owner=firewall".into()],
            ..worker.clone()
        },
        firewall_rules: Some(FirewallRules {
            egress: vec![FirewallEgressRule {
                protocol: "tcp".into(),
                ports: vec![443],
                to: vec!["0.0.0.0/0".into()],
                comment: "https".into(),
            }],
            ingress: Vec::new(),
        }),
    };
    let fw = client
        .firewall_allocate(&firewall)
        .await
        .expect("a firewall");

    let cluster = MachineFindRequest {
        tags: vec![CLUSTER.into()],
        ..Default::default()
    };
    let ready = support::eventually("both ready", support::LOADED_MACHINE_WAIT, || async {
        let found = client.machine_find(&cluster).await.ok()?;
        let ready = found.iter().all(|m| m.health() == MachineHealth::Ready);
        (found.len() == 2 && ready).then_some(found)
    })
    .await;
    let worker_seen = ready
        .iter()
        .find(|m| m.id == allocated.id)
        .expect("the worker");
    let alloc = worker_seen.allocation.as_ref().expect("allocated");
    assert!(alloc.succeeded, "phoned home is v1's succeeded");
    assert_eq!(alloc.role, ROLE_MACHINE);
    let primary = &alloc.networks[0];
    assert_eq!(
        (primary.networkid.as_str(), primary.networktype.as_str()),
        (
            network.id.as_str(),
            machine_network_type::PRIVATE_PRIMARY_UNSHARED
        )
    );
    assert!(
        worker_seen
            .tags
            .contains(&"capms.test/owner=worker-0".to_owned())
    );
    let fw_seen = client.firewall(&fw.id).await.expect("the firewall");
    let fw_alloc = fw_seen.allocation.expect("allocated");
    assert_eq!(fw_alloc.role, ROLE_FIREWALL);
    assert_eq!(fw_alloc.firewall_rules, firewall.firewall_rules);
    let summaries = client
        .machine_find_as::<MachineSummary>(&cluster)
        .await
        .expect("summaries");
    assert_eq!(summaries.len(), 2);

    client
        .machine_power(&allocated.id, PowerAction::Cycle)
        .await
        .expect("a power cycle");
    let refused = client
        .machine_reinstall(&allocated.id, "ubuntu-26.4")
        .await
        .expect_err("no reinstall in v2");
    assert_eq!(refused.status(), Some(422), "{refused}");
    assert!(!refused.is_transient());

    for id in [&allocated.id, &fw.id] {
        client.machine_free(id).await.expect("freed");
    }
    client.ip_free(&endpoint.ipaddress).await.expect("IP freed");
    support::eventually(
        "the network freed",
        support::LOADED_MACHINE_WAIT,
        || async { client.network_free(&network.id).await.ok() },
    )
    .await;
    assert_eq!(client.machine_find(&cluster).await.expect("found"), []);
    let gone = client.network(&network.id).await.expect_err("freed");
    assert!(gone.is_not_found(), "{gone}");
}

/// The default external network: the one of no project that is neither super nor underlay.
fn networks_default_external(all: &[Network]) -> String {
    let external = all
        .iter()
        .find(|n| n.networktype == "external")
        .expect("an external network");
    external.id.clone()
}

#[tokio::test]
async fn the_catalog_reads_through_v2_and_v1_s_machines_are_found_by_their_tags() {
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let v1 = sim.editor();
    let network = v1
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            name: "v1".into(),
            ..Default::default()
        })
        .await
        .expect("a network through v1");
    let through_v1 = v1
        .machine_allocate(&MachineAllocateRequest {
            name: "worker-v1".into(),
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            sizeid: "v1-small-x86".into(),
            imageid: "ubuntu-26.4".into(),
            networks: Some(vec![AllocationNetwork {
                networkid: network.id.clone(),
                autoacquire: Some(true),
            }]),
            tags: vec![CLUSTER.into()],
            ..Default::default()
        })
        .await
        .expect("a machine through v1");

    let client = v2_client(&sim).await;
    let cluster = MachineFindRequest {
        tags: vec![CLUSTER.into()],
        ..Default::default()
    };
    let found = client.machine_find(&cluster).await.expect("found");
    assert_eq!(
        found.iter().map(|m| &m.id).collect::<Vec<_>>(),
        [&through_v1.id]
    );

    let catalog = Catalog::fetch(&client).await.expect("the catalog");
    assert!(catalog.sizes.iter().any(|s| s.id == "v1-small-x86"));
    let image = catalog
        .images
        .iter()
        .find(|i| i.id.starts_with("firewall-ubuntu"));
    assert!(
        image.is_some_and(|i| i.has_feature(FEATURE_FIREWALL)),
        "{:?}",
        catalog.images
    );
    assert!(catalog.partitions.iter().any(|p| p.id == "mini-lab"));
    assert_eq!(catalog.projects.len(), 1);
    assert_eq!(catalog.projects[0].meta.id, PROJECT);
    assert_eq!(catalog.machines.len(), 1, "the project's machines");
    let latest = client.image_latest("ubuntu-26.4").await.expect("latest");
    assert!(latest.id.starts_with("ubuntu-26.4"), "{}", latest.id);

    let pinned = MachineAllocateRequest {
        uuid: Some(through_v1.id.clone()),
        ..Default::default()
    };
    let refused = client.machine_allocate(&pinned).await.expect_err("pinned");
    assert_eq!(refused.status(), Some(422), "{refused}");
    assert!(refused.to_string().contains("admins"), "{refused}");
}

/// A metal-apiserver URL from a Secret is the Secret's: an error reaching it names the Secret,
/// never the URL (it would end in conditions and capms's log).
#[tokio::test]
async fn an_unreachable_url_from_a_secret_is_named_by_the_secret_not_the_url() {
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let minted = sim.mint_capms_token(PROJECT, None).await;
    let token = minted["secret"].as_str().expect("a token").to_owned();
    let closed = format!("http://127.0.0.1:{}", support::free_port());
    let mut config = Config::new(
        url::Url::parse(&closed).expect("a URL"),
        Auth::Bearer(token),
    );
    config.v2_project = Some(PROJECT.into());
    config.origin = Some("Secret team-a/metal-v2".into());
    let client = Client::new(config).expect("a client");
    let unreachable = client.networks().await.expect_err("nothing answers");
    let said = format!("{unreachable} {unreachable:?}");
    assert!(
        said.contains("(as Secret team-a/metal-v2 gives it)"),
        "{said}"
    );
    assert!(!said.contains(&closed), "the URL named: {said}");
}
