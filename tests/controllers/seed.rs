//! Seed 000's manifests as acceptance fixtures: the cluster, its firewall and machine reach the seed's reconciled state, and deletion frees everything.

use super::*;
#[tokio::test(flavor = "current_thread")]
async fn seed_000_reaches_its_reconciled_state_and_deletion_frees_everything() {
    let env = Env::start("seed").await;
    let before = env.metal_state().await;
    env.apply_seed_cluster(MSC, fixture("metalstackcluster-initial.yaml"))
        .await;
    env.apply_seed_machine(MSC).await;

    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    the_cluster_is_as_the_seed_shows(&env, &clusters, &firewalls).await;
    the_machine_is_as_the_seed_shows(&env, &machines).await;
    metal_api_holds_what_the_seed_needs(&env).await;

    // Delete the Cluster: Cluster API deletes the Machine, capms frees everything it allocated.
    let cluster_api = env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
    cluster_api
        .delete(MSC, &DeleteParams::foreground())
        .await
        .expect("delete cluster");
    eventually(
        "the Cluster and its infrastructure to be gone",
        Duration::from_secs(120),
        || async {
            let gone = cluster_api.get_opt(MSC).await.ok()?.is_none()
                && clusters.get_opt(MSC).await.ok()?.is_none()
                && machines.get_opt(MSM).await.ok()?.is_none();
            gone.then_some(())
        },
    )
    .await;
    // Machines return to Waiting and their IPs are released a moment after the free.
    eventually(
        "the simulator to end as it began",
        Duration::from_secs(120),
        || async {
            let now = env.metal_state().await;
            let waiting = now
                .2
                .iter()
                .all(|m| m.allocation.is_none() && m.last_event() == Some(event::WAITING));
            (now.0.is_empty() && now.1 == before.1 && waiting).then_some(())
        },
    )
    .await;
}

/// Ready and provisioned, owned by its Cluster, the seed's endpoint reserved, every step's
/// condition True, and its firewall on the seed's preset machine.
async fn the_cluster_is_as_the_seed_shows(
    env: &Env,
    clusters: &Api<MetalStackCluster>,
    firewalls: &Api<MetalStackFirewall>,
) {
    let msc = wait_ready(env, clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let status = msc.status.clone().expect("status");
    assert_eq!(
        status.initialization.and_then(|i| i.provisioned),
        Some(true),
        "ready and provisioned together"
    );
    let owner = &msc
        .metadata
        .owner_references
        .clone()
        .expect("owner references")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Cluster", MSC),
        "owned by the Cluster, as the seed shows"
    );
    assert_eq!(
        msc.spec
            .control_plane_endpoint
            .clone()
            .and_then(|e| e.host)
            .as_deref(),
        Some("100.255.254.1")
    );
    assert_eq!(
        status.allocated_control_plane_ip.as_deref(),
        Some("100.255.254.1"),
        "the given host is reserved as a static IP"
    );
    for condition in [
        "Ready",
        "NetworkReady",
        "ControlPlaneIPReady",
        "FirewallReady",
    ] {
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == condition && c.status == "True"),
            "{condition} in {:?}",
            status.conditions
        );
    }
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Paused" && c.status == "False")
    );

    let fw = firewalls
        .get(&format!("{MSC}-firewall"))
        .await
        .expect("firewall created from firewallSpec");
    assert!(fw.status.as_ref().is_some_and(|s| s.ready));
    assert_eq!(
        fw.status.as_ref().and_then(|s| s.machine_id.as_deref()),
        Some(FIREWALL_MACHINE),
        "the seed's preset firewall machine"
    );
}

/// Ready and provisioned, owned by its Machine, the providerID the user wrote, the seed's
/// address kinds and hostname, and its rack label.
async fn the_machine_is_as_the_seed_shows(env: &Env, machines: &Api<MetalStackMachine>) {
    let msm = wait_ready(env, machines, MSM, |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert_eq!(
        msm.spec.provider_id.as_deref(),
        Some("metalstack://e0ab02d2-27cd-5a5e-8efc-080ba80cf258"),
        "a providerID the user wrote is kept"
    );
    let owner = &msm
        .metadata
        .owner_references
        .clone()
        .expect("owner references")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Machine", MSC),
        "owned by the Machine, as the seed shows"
    );
    let mstatus = msm.status.clone().expect("status");
    assert_eq!(
        mstatus.initialization.and_then(|i| i.provisioned),
        Some(true)
    );
    let kinds: Vec<_> = mstatus
        .addresses
        .iter()
        .map(|a| serde_json::to_value(a.type_).expect("type"))
        .collect();
    assert_eq!(
        kinds,
        [json!("InternalIP"), json!("Hostname"), json!("InternalDNS")],
        "the seed's address kinds"
    );
    assert!(
        mstatus.addresses[0].address.starts_with("172.22."),
        "InternalIP from the cluster's private network"
    );
    assert_eq!(
        (
            mstatus.addresses[1].address.as_str(),
            mstatus.addresses[2].address.as_str()
        ),
        ("node-1", "node-1"),
        "the hostname the bootstrap cloud-config sets, as the seed shows"
    );
    assert!(
        msm.metadata
            .labels
            .clone()
            .unwrap_or_default()
            .contains_key("machine.metal-stack.io/rack")
    );
}

/// The simulator holds exactly one network, one control-plane IP, one firewall and one machine.
async fn metal_api_holds_what_the_seed_needs(env: &Env) {
    let (networks, ips, metal_machines) = env.metal_state().await;
    assert_eq!(networks.len(), 1, "{networks:?}");
    let allocated: Vec<_> = metal_machines
        .iter()
        .filter(|m| m.allocation.is_some())
        .collect();
    assert_eq!(allocated.len(), 2, "one firewall and one machine");
    let worker = allocated
        .iter()
        .find(|m| m.id == WORKER_MACHINE)
        .expect("the seed's machine");
    let wa = worker.allocation.as_ref().expect("allocation");
    assert_eq!(
        wa.user_data, "#cloud-config\nhostname: node-1\n",
        "bootstrap data passed as user data"
    );
    assert_eq!(
        wa.image.as_ref().map(|i| i.id.as_str()),
        Some("ubuntu-cloud-init-20.04.20201126")
    );
    assert_eq!(wa.role, "machine");
    let firewall = allocated
        .iter()
        .find(|m| m.id == FIREWALL_MACHINE)
        .expect("the seed's firewall machine");
    assert_eq!(
        firewall.allocation.as_ref().map(|a| a.role.as_str()),
        Some("firewall")
    );
    let cp_ips: Vec<_> = ips
        .iter()
        .filter(|ip| ip.networkid == "internet-vagrant-lab" && ip.type_ == "static")
        .collect();
    assert_eq!(cp_ips.len(), 1, "{ips:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn seed_000_standalone_firewall_reaches_ready() {
    let env = Env::start("firewall").await;
    // The seed's firewall belongs to cluster test1-v8vmn (its cluster-name label); that cluster's
    // MetalStackCluster is the seed's, without a firewallSpec of its own.
    let mut msc = fixture("metalstackcluster-initial.yaml");
    msc["metadata"]["name"] = json!("test1-v8vmn");
    msc["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("firewallSpec");
    env.apply_seed_cluster("test1-v8vmn", msc).await;
    env.apply(fixture("metalstackfirewall-initial.yaml")).await;

    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let fw = wait_ready(&env, &firewalls, "test1-v8vmn", |f| {
        f.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert_eq!(
        fw.spec.provider_id.as_deref(),
        Some("metalstack://2294c949-88f6-5390-8154-fa53d93a3313")
    );
    let machine = env
        .sim
        .editor()
        .firewall(FIREWALL_MACHINE)
        .await
        .expect("the seed's firewall machine is a firewall now");
    assert_eq!(machine.last_event(), Some(event::PHONED_HOME));
}
