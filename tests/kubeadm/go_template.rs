//! metal-stack's Go provider's own `cluster-template.yaml` (v0.8.0, read from the shared
//! reference), rendered by the real clusterctl with its variables and applied unchanged: its
//! `v1alpha1` objects go through capms's conversion webhook, its firewall deployment and static
//! control-plane IP through capms's controllers, and its Ignition kubeadm configuration with the
//! kube-vip static pod on port 443 through the real kubeadm providers and the node stand-in.

use super::*;
use metal_api::types::IpAllocateRequest;

/// Renders the Go provider's template for `ns` with the lab's values for its variables
/// (its `example_variables.rc` names them): one control-plane machine, one worker.
async fn render_go_template(cp: &ControlPlane, ns: &str, control_plane_ip: &str) -> String {
    let template = repo_root()
        .join("../shared/reference/capms-v0.8.0/clusterctl-templates/cluster-template.yaml");
    let variables = [
        ("METAL_PROJECT_ID", "00000000-0000-0000-0000-000000000001"),
        ("METAL_PARTITION", "mini-lab"),
        ("FIREWALL_MACHINE_SIZE", "v1-small-x86"),
        ("FIREWALL_MACHINE_IMAGE", "firewall-ubuntu-3.0"),
        ("FIREWALL_EXTERNAL_NETWORKS", "[internet-mini-lab]"),
        ("CONTROL_PLANE_IP", control_plane_ip),
        ("CONTROL_PLANE_MACHINE_SIZE", "v1-small-x86"),
        ("CONTROL_PLANE_MACHINE_IMAGE", "capms-ubuntu-1.33.5"),
        ("WORKER_MACHINE_SIZE", "v1-small-x86"),
        ("WORKER_MACHINE_IMAGE", "capms-ubuntu-1.33.5"),
    ];
    generate(cp, ns, &template, ("1", "1"), &variables).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_provider_s_template_reaches_running_unchanged() {
    let _one = ONE_AT_A_TIME.lock().await;
    let stack = Stack::start("go-template", Inventory::default_lab()).await;
    // The static IP its README has the user make first with metalctl.
    let ip = stack
        .sim
        .editor()
        .ip_allocate(&IpAllocateRequest {
            networkid: "internet-mini-lab".into(),
            projectid: "00000000-0000-0000-0000-000000000001".into(),
            type_: "static".into(),
            name: format!("{CLUSTER}-vip"),
            ..Default::default()
        })
        .await
        .expect("static control-plane IP");
    let cp = ControlPlane::shared();
    let rendered = render_go_template(cp, &stack.ns.name, &ip.ipaddress).await;
    assert!(rendered.contains("infrastructure.cluster.x-k8s.io/v1alpha1"));
    let file = stack.work.path().join("go-cluster.yaml");
    std::fs::write(&file, rendered).expect("write");
    cp.kubectl(&["apply", "--server-side", "-f"], &[file]);

    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    wait_running(
        client,
        ns,
        2,
        "the Go template's control-plane machine and worker Running",
    )
    .await;
    let go = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "infrastructure.cluster.x-k8s.io",
                "v1alpha1",
                "MetalStackCluster",
            ),
            "metalstackclusters",
        ),
    )
    .get(CLUSTER)
    .await
    .expect("the cluster as v1alpha1");
    assert_eq!(
        go.data["spec"]["controlPlaneEndpoint"],
        json!({"host": ip.ipaddress, "port": 443}),
        "the static IP on the Go provider's port"
    );
    assert_eq!(go.data["status"]["ready"], json!(true));
    let nodes = workload_nodes(&stack.kubeconfig()).await;
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert_eq!(
        allocated(&stack.sim, ns).len(),
        3,
        "firewall, control plane, worker"
    );
    stack.delete_cluster().await;
    let ips = stack
        .sim
        .editor()
        .ip_find(&Default::default())
        .await
        .expect("IPs");
    assert!(
        ips.iter().any(|i| i.ipaddress == ip.ipaddress),
        "the static control-plane IP is never freed"
    );
}
