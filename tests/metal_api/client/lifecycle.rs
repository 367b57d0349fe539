//! The whole life of a cluster's metal-api resources: network, IPs, a worker and a firewall
//! allocated, observed to Phoned Home, refused while in use, freed, and everything as it was.

use super::*;

#[tokio::test]
async fn allocate_observe_and_free_everything() {
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let client = sim.editor();
    let network = cluster_network(&client).await;
    let (cp_ip, static_ip) = control_plane_ips(&client).await;
    let machine = worker(&client, &network.id).await;
    let firewall = firewall(&client, &network.id, &machine.id).await;
    ready_and_refused_while_in_use(&client, &network.id, &machine.id, &firewall.id).await;
    free_machines(&client, &machine.id, &firewall.id).await;
    free_network_and_ips(&client, &network.id, [&cp_ip, &static_ip]).await;
}

async fn cluster_network(client: &Client) -> Network {
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
    network
}

async fn control_plane_ips(client: &Client) -> (Ip, Ip) {
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
    (cp_ip, static_ip)
}

async fn worker(client: &Client, network: &str) -> Machine {
    // A worker: image name resolution, auto-acquired private IP, system tags.
    let machine = client
        .machine_allocate(&machine_request(network, "ubuntu-26.4"))
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
    machine
}

async fn firewall(client: &Client, network: &str, machine: &str) -> Machine {
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
    let mut fw_req = machine_request(network, "firewall-ubuntu-3.0");
    fw_req.name = "cluster-a-firewall".into();
    fw_req.networks = Some(vec![
        AllocationNetwork {
            networkid: "internet-mini-lab".into(),
            autoacquire: Some(true),
        },
        AllocationNetwork {
            networkid: network.to_owned(),
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
    assert_ne!(firewall.id, machine);
    assert_eq!(
        client
            .firewall(&firewall.id)
            .await
            .expect("firewall get")
            .id,
        firewall.id
    );
    assert_eq!(
        status(client.firewall(machine).await),
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
    firewall
}

async fn ready_and_refused_while_in_use(
    client: &Client,
    network: &str,
    machine: &str,
    firewall: &str,
) {
    // The lifecycle runs on timers to Phoned Home.
    let ready = wait_for_event(client, machine, event::PHONED_HOME).await;
    let events: Vec<_> = ready.events.log.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        &events[..4],
        ["Phoned Home", "Booting New Kernel", "Installing", "Waiting"]
    );
    assert_eq!(ready.liveliness, "Alive");
    wait_for_event(client, firewall, event::PHONED_HOME).await;

    // Refusals while things are in use.
    let (code, message) = status(client.network_free(network).await);
    assert_eq!(code, 422);
    assert!(
        message.contains("has ips, delete prefix not possible"),
        "{message}"
    );
    assert_eq!(
        status(client.ip_free("127.16.0.1").await),
        (400, "ip with machine scope can not be deleted".into())
    );
}

async fn free_machines(client: &Client, machine: &str, firewall: &str) {
    // Free the machines: allocation gone at once, IPs released after a while, back to Waiting.
    let freed = client.machine_free(machine).await.expect("machine freed");
    assert!(freed.allocation.is_none() && freed.tags.is_empty());
    client.machine_free(firewall).await.expect("firewall freed");
    client
        .machine_free(firewall)
        .await
        .expect("freeing a free machine is fine");
    for id in [machine, firewall] {
        let back = wait_for_event(client, id, event::WAITING).await;
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
            machineid: Some(machine.to_owned()),
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
}

async fn free_network_and_ips(client: &Client, network: &str, ips: [&Ip; 2]) {
    // Now the network and the IPs can go, and everything is as it was.
    let freed_net = client.network_free(network).await.expect("network freed");
    assert_eq!(freed_net.id, network);
    assert_eq!(
        status(client.network_free(network).await).0,
        404,
        "a second free is a 404"
    );
    for ip in ips {
        client.ip_free(&ip.ipaddress).await.expect("ip freed");
    }
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
    let again = private_network(client).await;
    assert_eq!(
        again.prefixes,
        ["127.16.0.0/22"],
        "the released prefix is handed out again"
    );
}
