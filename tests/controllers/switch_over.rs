//! The switch-over from metal-stack's Go provider v0.8.0: a management cluster with its CRDs
//! and a running cluster as it leaves them (in the apiserver, stored as `v1alpha1`, and in
//! metal-api, allocated by replaying its calls with its tags), then capms's CRDs applied over
//! its and capms started. Every stored object stays readable in every served version, capms
//! takes over what the Go provider allocated without allocating anything, and deleting the
//! Cluster frees what the Go provider would have freed.

use super::*;
use capms::ownership::DOMAIN;
use clusterctl_upgrade::upgraded_by_clusterctl;
use metal_api::tags::CLUSTER_ID;

pub(super) const CLUSTER: &str = "go-cluster";
pub(super) const WORKER: &str = "go-cluster-worker-0";
const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
pub(super) const GO: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

/// What the Go provider (and its user, for the static IP) allocated in metal-api.
pub(super) struct Allocated {
    pub(super) ip: String,
    pub(super) network: String,
    pub(super) firewall: String,
    pub(super) machine: String,
}

/// Replays the Go provider's metal-api calls for a cluster with one worker, with the requests
/// and tags existing-providers.md (section 2) lists.
async fn allocate_as_the_go_provider(env: &Env) -> Allocated {
    let metal = env.sim.editor();
    let ns = &env.ns.name;
    let cluster_id = format!("{ns}.{CLUSTER}");
    // The static control-plane IP its templates have the user make first (section 2.6).
    let ip = metal
        .ip_allocate(&IpAllocateRequest {
            networkid: "internet-mini-lab".into(),
            projectid: PROJECT.into(),
            type_: "static".into(),
            name: format!("{CLUSTER}-vip"),
            ..Default::default()
        })
        .await
        .expect("static IP");
    // Section 2.3, reconcile step 1.
    let network = metal
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            name: CLUSTER.into(),
            description: format!("{ns}/{CLUSTER}"),
            labels: [(CLUSTER_ID.to_owned(), cluster_id.clone())].into(),
            ..Default::default()
        })
        .await
        .expect("node network");
    // Section 2.5, reconcile step 6: its machine and firewall tags use the network's ID as the
    // cluster id.
    let rule = |protocol: &str, ports: Vec<i32>, comment: &str| FirewallEgressRule {
        protocol: protocol.into(),
        ports,
        to: vec!["0.0.0.0/0".into()],
        comment: comment.into(),
    };
    let firewall = metal
        .firewall_allocate(&FirewallCreateRequest {
            machine: MachineAllocateRequest {
                name: format!("{CLUSTER}-firewall"),
                hostname: format!("{CLUSTER}-firewall"),
                description: format!("firewall for cluster {CLUSTER}"),
                projectid: PROJECT.into(),
                partitionid: "mini-lab".into(),
                imageid: "firewall-ubuntu-3.0".into(),
                sizeid: "v1-small-x86".into(),
                networks: Some(
                    ["internet-mini-lab", network.id.as_str()]
                        .map(|id| AllocationNetwork {
                            networkid: id.into(),
                            autoacquire: Some(true),
                        })
                        .into(),
                ),
                tags: vec![
                    format!("{CLUSTER_ID}={}", network.id),
                    format!("{DOMAIN}/cluster-resource={cluster_id}"),
                    "firewall.metal-stack.io/managed-by=cluster-api-provider-metal-stack".into(),
                    format!("{DOMAIN}/firewall-deployment-resource={ns}.{CLUSTER}"),
                ],
                ..Default::default()
            },
            firewall_rules: Some(FirewallRules {
                egress: vec![
                    rule(
                        "TCP",
                        vec![80, 443],
                        "allow outgoing HTTP and HTTPS traffic",
                    ),
                    rule("TCP", vec![53], "allow outgoing DNS traffic via TCP"),
                    rule(
                        "UDP",
                        vec![53, 123],
                        "allow outgoing DNS and NTP traffic via UDP",
                    ),
                ],
                ingress: vec![FirewallIngressRule {
                    protocol: "TCP".into(),
                    ports: vec![80, 443],
                    from: vec!["0.0.0.0/0".into()],
                    comment: "allow incoming HTTP and HTTPS traffic".into(),
                    ..Default::default()
                }],
            }),
        })
        .await
        .expect("firewall");
    // Section 2.4, create.
    let machine = metal
        .machine_allocate(&MachineAllocateRequest {
            name: WORKER.into(),
            hostname: WORKER.into(),
            description: format!("{ns}/{WORKER} for cluster {ns}/{CLUSTER}"),
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            imageid: "ubuntu-26.4".into(),
            sizeid: "v1-small-x86".into(),
            networks: Some(vec![AllocationNetwork {
                networkid: network.id.clone(),
                autoacquire: Some(true),
            }]),
            user_data: r#"{"ignition":{"version":"3.4.0"}}"#.into(),
            placement_tags: vec![format!("{CLUSTER_ID}={cluster_id}")],
            tags: vec![
                format!("{CLUSTER_ID}={}", network.id),
                format!("{DOMAIN}/cluster-resource={cluster_id}"),
                format!("{DOMAIN}/machine-resource={ns}.{WORKER}"),
                "topology.kubernetes.io/zone=mini-lab".into(),
                format!("kubernetes.io/hostname={WORKER}"),
            ],
            ..Default::default()
        })
        .await
        .expect("worker");
    Allocated {
        ip: ip.ipaddress,
        network: network.id,
        firewall: firewall.id,
        machine: machine.id,
    }
}

/// The fixture's objects, filled in, in its order.
fn go_provider_objects(ns: &str, allocated: &Allocated) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/go-provider/objects.yaml"))
        .expect("fixture");
    let text = text
        .replace("${PROJECT}", PROJECT)
        .replace("${CONTROL_PLANE_IP}", &allocated.ip)
        .replace("${NETWORK_ID}", &allocated.network)
        .replace("${FIREWALL_ID}", &allocated.firewall)
        .replace("${MACHINE_ID}", &allocated.machine)
        .replace("${NAMESPACE}", ns);
    text.split("\n---\n")
        .filter(|doc| doc.contains("kind:"))
        .map(|doc| serde_saphyr::from_str(doc).expect("fixture YAML"))
        .collect()
}

impl Env {
    /// Creates `object` as given, then its status through the status subresource.
    async fn create_with_status(&self, object: &Value) {
        let mut object = object.clone();
        let status = object.as_object_mut().and_then(|o| o.remove("status"));
        self.apply(object.clone()).await;
        let Some(status) = status else { return };
        let kind = object["kind"].as_str().expect("kind");
        let name = object["metadata"]["name"].as_str().expect("name");
        let api = self.dynamic(
            object["apiVersion"].as_str().expect("apiVersion"),
            kind,
            &format!("{}s", kind.to_lowercase()),
        );
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap_or_else(|e| panic!("status of {kind} {name}: {e}"));
    }

    /// `child` gets an ownerReference to the `owner_kind` named `owner` (its UID read back).
    async fn own(&self, child: (&str, &str), owner_kind: &str, owner: &str, controller: bool) {
        let plural = |kind: &str| format!("{}s", kind.to_lowercase());
        let owner_object = self
            .dynamic(GO, owner_kind, &plural(owner_kind))
            .get(owner)
            .await
            .expect("owner");
        let reference = json!({"apiVersion": GO, "kind": owner_kind, "name": owner,
            "uid": owner_object.metadata.uid, "controller": controller});
        self.dynamic(GO, child.0, &plural(child.0))
            .patch(
                child.1,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"ownerReferences": [reference]}})),
            )
            .await
            .expect("owner reference");
    }

    /// The private networks, the IPs and the allocated machines' IDs in metal-api.
    pub(super) async fn allocations(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let (networks, ips, machines) = self.metal_state().await;
        let mut allocated: Vec<String> = machines
            .into_iter()
            .filter(|m| m.allocation.is_some())
            .map(|m| m.id)
            .collect();
        allocated.sort();
        let mut ips: Vec<String> = ips.into_iter().map(|ip| ip.ipaddress).collect();
        ips.sort();
        (networks.into_iter().map(|n| n.id).collect(), ips, allocated)
    }
}

/// How capms's components replace the Go provider's.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Replacement {
    /// capms's CRDs applied over the Go provider's.
    PlainApply,
    /// `clusterctl upgrade apply` with the metal-stack provider overridden by capms's release.
    ClusterctlUpgrade,
}

/// On `cp` (made by [`ControlPlane::go_provider_management`]): a namespace with a running
/// cluster as the Go provider leaves it, in the apiserver and in metal-api; then capms's
/// components replacing the Go provider's, and capms started and awaited until it has taken the
/// cluster over.
pub(super) async fn taken_over(
    cp: &ControlPlane,
    label: &str,
    replacement: Replacement,
) -> (Env, Allocated) {
    let mut env = Env::on(cp, label, Inventory::default_lab()).await;
    if replacement == Replacement::ClusterctlUpgrade {
        cp.install_go_provider_by_clusterctl_init(&env.sim.url)
            .await;
    }
    let allocated = allocate_as_the_go_provider(&env).await;
    for object in go_provider_objects(&env.ns.name, &allocated) {
        env.create_with_status(&object).await;
    }
    env.own(
        ("MetalStackFirewallDeployment", CLUSTER),
        "MetalStackCluster",
        CLUSTER,
        true,
    )
    .await;
    env.own(
        ("MetalStackFirewallTemplate", CLUSTER),
        "MetalStackFirewallDeployment",
        CLUSTER,
        false,
    )
    .await;
    let before = env.allocations().await;

    let capms_args = match replacement {
        Replacement::PlainApply => {
            cp.install_capms_crds();
            Vec::new()
        }
        Replacement::ClusterctlUpgrade => upgraded_by_clusterctl(cp, &env).await,
    };
    every_stored_object_reads_in_every_served_version(&env, &allocated).await;
    let capms_args: Vec<&str> = capms_args.iter().map(String::as_str).collect();
    env.start_capms(&capms_args);
    everything_becomes_ready(&env, &allocated).await;
    assert_eq!(env.allocations().await, before, "capms allocated nothing");
    (env, allocated)
}

#[tokio::test(flavor = "current_thread")]
async fn capms_takes_over_a_go_provider_cluster_in_place() {
    let cp = ControlPlane::go_provider_management("switch-over");
    let (env, allocated) = taken_over(&cp, "switch-over", Replacement::PlainApply).await;
    deleting_the_cluster_frees_what_the_go_provider_would(&env, &allocated).await;
}

#[tokio::test(flavor = "current_thread")]
async fn capms_takes_over_by_clusterctl_upgrade_apply() {
    let cp = ControlPlane::go_provider_management("clusterctl-upgrade");
    let (env, allocated) =
        taken_over(&cp, "clusterctl-upgrade", Replacement::ClusterctlUpgrade).await;
    deleting_the_cluster_frees_what_the_go_provider_would(&env, &allocated).await;
}

/// Deleting the Cluster frees the node network, the firewall and the worker, keeps the static
/// control-plane IP its user made, and takes the firewall deployment with it.
async fn deleting_the_cluster_frees_what_the_go_provider_would(env: &Env, allocated: &Allocated) {
    env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .expect("delete the Cluster");
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let gone = tokio::time::timeout(Duration::from_secs(300), async {
        while clusters.get_opt(CLUSTER).await.ok().flatten().is_some() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    if gone.await.is_err() {
        let left = clusters.get_opt(CLUSTER).await.ok().flatten();
        let machines = env.dynamic(GO, "MetalStackMachine", "metalstackmachines");
        let machines = machines.list(&Default::default()).await.map(|l| l.items);
        panic!(
            "the MetalStackCluster is still there after 300 s: {left:#?}\nmachines: {machines:#?}\ncapms log:\n{}",
            env.capms_log()
        );
    }
    // The Go provider's finalizer on its firewall deployment goes with the firewall; the
    // deployment (owned by the MetalStackCluster) then goes too.
    let deployments = env.dynamic(
        GO,
        "MetalStackFirewallDeployment",
        "metalstackfirewalldeployments",
    );
    eventually(
        "the firewall deployment to be gone",
        Duration::from_secs(120),
        || async {
            deployments
                .get_opt(CLUSTER)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    let (networks, ips, machines) = env.allocations().await;
    assert!(
        networks.is_empty(),
        "the node network is freed: {networks:?}"
    );
    assert!(
        machines.is_empty(),
        "firewall and worker are freed: {machines:?}"
    );
    assert!(
        ips.contains(&allocated.ip),
        "the static control-plane IP stays: {ips:?}"
    );
}

/// Each kind in each version it is served in.
async fn every_stored_object_reads_in_every_served_version(env: &Env, allocated: &Allocated) {
    let kinds = [
        ("MetalStackCluster", CLUSTER),
        ("MetalStackMachine", WORKER),
        ("MetalStackFirewallTemplate", CLUSTER),
    ];
    for (kind, name) in kinds {
        for version in ["v1alpha1", "v1alpha3", "v1alpha4"] {
            let api_version = format!("infrastructure.cluster.x-k8s.io/{version}");
            let plural = format!("{}s", kind.to_lowercase());
            let object = env.dynamic(&api_version, kind, &plural).get(name).await;
            let object = object.unwrap_or_else(|e| panic!("{kind} {name} as {version}: {e}"));
            assert!(object.data.get("spec").is_some(), "{kind} as {version}");
        }
    }
    let go = env
        .dynamic(GO, "MetalStackCluster", "metalstackclusters")
        .get(CLUSTER)
        .await
        .expect("v1alpha1");
    assert_eq!(go.data["spec"]["nodeNetworkID"], allocated.network.as_str());
    assert_eq!(go.data["status"]["ready"], true, "the status as stored");
    let hub = env
        .dynamic(
            "infrastructure.cluster.x-k8s.io/v1alpha4",
            "MetalStackCluster",
            "metalstackclusters",
        )
        .get(CLUSTER)
        .await
        .expect("v1alpha4");
    assert_eq!(
        hub.data["spec"]["privateNetworkID"],
        allocated.network.as_str()
    );
}

/// In `v1alpha1`, the Go provider's condition types carry capms's conditions for the same steps.
async fn the_go_provider_s_conditions_show_capms_s(env: &Env, cluster: &MetalStackCluster) {
    let go = env
        .dynamic(GO, "MetalStackCluster", "metalstackclusters")
        .get(CLUSTER)
        .await
        .expect("v1alpha1");
    let hub = &cluster.status.as_ref().expect("status").conditions;
    for (capms, go_type) in [
        ("NetworkReady", "ClusterNodeNetworkEnsured"),
        ("FirewallReady", "ClusterFirewallDeploymentEnsured"),
        ("ControlPlaneIPReady", "ClusterControlPlaneIPEnsured"),
    ] {
        let source = condition(hub, capms).unwrap_or_else(|| panic!("{capms} in {hub:?}"));
        let conditions = go.data["status"]["conditions"].as_array().cloned();
        let shown = conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c["type"] == go_type)
            .unwrap_or_else(|| panic!("{go_type} in {:#}", go.data["status"]));
        assert_eq!(
            (shown["status"].as_str(), shown["reason"].as_str()),
            (Some(source.status.as_str()), Some(source.reason.as_str())),
            "{go_type} shows {capms}"
        );
    }
}

/// The cluster, its firewall (on the Go provider's machine) and the worker reach Ready under
/// capms; the firewall deployment keeps naming the same firewall.
async fn everything_becomes_ready(env: &Env, allocated: &Allocated) {
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let capms_ready =
        |conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]| {
            condition(conditions, "Ready")
                .is_some_and(|c| c.status == "True" && c.reason == "Provisioned")
                && condition(conditions, "FirewallReady").is_some_and(|c| c.status == "True")
        };
    let cluster = wait_ready(env, &clusters, CLUSTER, |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.ready && capms_ready(&s.conditions))
    })
    .await;
    the_go_provider_s_conditions_show_capms_s(env, &cluster).await;
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let firewall = wait_ready(env, &firewalls, &format!("{CLUSTER}-firewall"), |f| {
        f.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert_eq!(
        firewall.spec.provider_id,
        Some(format!("metal://mini-lab/{}", allocated.firewall)),
        "the Go provider's firewall, taken over"
    );
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    wait_ready(env, &machines, WORKER, |m| {
        m.status
            .as_ref()
            .is_some_and(|s| condition(&s.conditions, "Ready").is_some_and(|c| c.status == "True"))
    })
    .await;
    // capms reports the firewall in the deployment's status, as the Go provider's users read it.
    let deployments = env.dynamic(
        GO,
        "MetalStackFirewallDeployment",
        "metalstackfirewalldeployments",
    );
    let deployment = eventually(
        "the firewall deployment's status to say ready",
        Duration::from_secs(120),
        || async {
            let d = deployments.get(CLUSTER).await.ok()?;
            let status = &d.data["status"];
            (status["ready"] == true && status["initialization"]["provisioned"] == true)
                .then_some(d)
        },
    )
    .await;
    assert_eq!(
        deployment.data["spec"]["managedResourceRef"]["name"],
        format!("metal://mini-lab/{}", allocated.firewall)
    );
}
