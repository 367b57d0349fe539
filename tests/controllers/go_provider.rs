//! The Go provider's API (`v1alpha1`) reconciled by capms: a cluster written as its users write
//! it (a static control-plane IP made beforehand, a firewall deployment naming a firewall
//! template), converted by the conversion webhook, reaching Ready, readable in every served
//! version, and torn down without freeing the IP it was given.

use super::*;

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
/// The default lab's static IP of the public network, made beforehand as the Go provider's
/// templates ask (`metalctl network ip create --type static`).
const STATIC_IP: &str = "127.100.0.142";
const GO: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

fn go_provider_objects() -> [Value; 3] {
    [
        json!({
            "apiVersion": GO, "kind": "MetalStackFirewallTemplate",
            "metadata": {"name": "firewall"},
            "spec": {
                "image": "firewall-ubuntu-3.0", "size": "v1-small-x86", "networks": ["internet-mini-lab"],
                "partition": "mini-lab", "project": PROJECT,
                "initialRuleSet": {
                    "egress": [{"comment": "allow outgoing https", "ports": [443], "protocol": "TCP", "to": ["0.0.0.0/0"]}],
                    "ingress": [{"comment": "allow incoming http", "ports": [80], "protocol": "TCP", "from": ["0.0.0.0/0"]}]
                }
            }
        }),
        json!({
            "apiVersion": GO, "kind": "MetalStackFirewallDeployment",
            "metadata": {"name": "firewall"},
            "spec": {"firewallTemplateRef": {"name": "firewall"}, "autoUpdate": {"machineImage": true}}
        }),
        json!({
            "apiVersion": GO, "kind": "MetalStackCluster",
            "metadata": {"name": MSC},
            "spec": {
                "partition": "mini-lab", "projectID": PROJECT, "controlPlaneIP": STATIC_IP,
                "firewallDeploymentRef": {"name": "firewall"}
            }
        }),
    ]
}

#[tokio::test(flavor = "current_thread")]
async fn a_go_provider_cluster_reaches_ready_and_keeps_its_given_ip() {
    let mut env = Env::with_inventory("goprovider", Inventory::default_lab()).await;
    let user = format!("capms-{}", env.ns.name);
    bind_user(&env, &user, shipped_cluster_role(&user, true)).await;
    env.kubeconfig = Some(ControlPlane::shared().user_kubeconfig(&user, env.work.path()));
    // No scheduled catalog refresh in the test's time: the image lists counted below are the
    // first fetch and refreshes on a miss only.
    env.start_capms(&["--catalog-refresh=1h"]);
    let [template, deployment, msc] = go_provider_objects();
    env.apply(template).await;
    env.apply(deployment).await;
    env.apply_seed_cluster(MSC, msc).await;

    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let ready = wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let endpoint = ready
        .spec
        .control_plane_endpoint
        .clone()
        .unwrap_or_default();
    assert_eq!(
        (endpoint.host.as_deref(), endpoint.port),
        (Some(STATIC_IP), Some(443)),
        "the given IP, on the Go provider's port"
    );
    let status = ready.status.clone().unwrap_or_default();
    let firewall_ready = condition(&status.conditions, "FirewallReady").expect("FirewallReady");
    assert!(
        firewall_ready
            .message
            .contains("following spec.autoUpdate.machineImage of MetalStackFirewallDeployment firewall: the newest firewall image is firewall-ubuntu-3.0"),
        "{}",
        firewall_ready.message
    );
    the_firewall_is_made_from_the_deployment_s_template(&env).await;
    every_version_reads_the_cluster(&env, status.network_id.as_deref()).await;
    // The auto-update reads the images from the catalog the webhooks keep, not from metal-api
    // on each of the reconciles so far: the catalog's first fetch, and a refresh on a miss.
    let image_lists: u64 = env
        .sim
        .sim
        .stats()
        .report()
        .requests
        .iter()
        .filter(|r| r.route == "/v1/image" && r.method == "GET")
        .map(|r| r.count)
        .sum();
    assert!(image_lists <= 2, "{image_lists} image lists in metal-api");

    env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .delete(MSC, &DeleteParams::default())
        .await
        .expect("delete the Cluster");
    eventually(
        "the MetalStackCluster to be gone",
        Duration::from_secs(180),
        || async { clusters.get_opt(MSC).await.ok()?.is_none().then_some(()) },
    )
    .await;
    let (networks, ips, machines) = env.metal_state().await;
    assert!(
        ips.iter().any(|ip| ip.ipaddress == STATIC_IP),
        "the given control-plane IP is never freed: {ips:?}"
    );
    assert!(networks.is_empty(), "the allocated network is freed");
    assert!(
        machines.iter().all(|m| m.allocation.is_none()),
        "the firewall is freed"
    );
}

/// The firewall has the template's image, size, networks and rules (protocols as capms
/// writes them).
async fn the_firewall_is_made_from_the_deployment_s_template(env: &Env) {
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let fw = firewalls
        .get(&format!("{MSC}-firewall"))
        .await
        .expect("the cluster's firewall");
    assert_eq!(
        (fw.spec.image.as_str(), fw.spec.machine_type.as_str()),
        ("firewall-ubuntu-3.0", "v1-small-x86")
    );
    assert_eq!(fw.spec.networks, ["internet-mini-lab"]);
    let rules = serde_json::to_value(&fw.spec.rules).expect("json");
    assert_eq!(rules["egress"][0]["protocol"], "tcp", "{rules}");
    assert_eq!(rules["ingress"][0]["from"], json!(["0.0.0.0/0"]), "{rules}");
}

/// The stored cluster in each served version: v1alpha1 shows the allocated network as
/// nodeNetworkID (where the Go provider writes it) and its own fields as given.
async fn every_version_reads_the_cluster(env: &Env, network: Option<&str>) {
    let go = env
        .dynamic(GO, "MetalStackCluster", "metalstackclusters")
        .get(MSC)
        .await
        .expect("the cluster as v1alpha1");
    let go = serde_json::to_value(&go).expect("json");
    assert_eq!(go["spec"]["nodeNetworkID"].as_str(), network, "{go:#}");
    assert_eq!(go["spec"]["controlPlaneIP"], STATIC_IP);
    assert_eq!(go["spec"]["firewallDeploymentRef"]["name"], "firewall");
    assert_eq!(go["status"]["ready"], true);
    assert_eq!(go["status"]["initialization"]["provisioned"], true);
    let legacy = env
        .dynamic(
            "infrastructure.cluster.x-k8s.io/v1alpha3",
            "MetalStackCluster",
            "metalstackclusters",
        )
        .get(MSC)
        .await
        .expect("the cluster as v1alpha3");
    assert_eq!(legacy.data["spec"]["controlPlaneIP"], STATIC_IP);
}
