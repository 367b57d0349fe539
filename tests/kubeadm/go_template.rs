//! metal-stack's Go provider's own cluster templates (v0.8.0, read from the shared reference),
//! rendered by the real clusterctl with their variables and applied unchanged: their
//! `v1alpha1` objects go through capms's conversion webhook, their firewall deployment and static
//! control-plane IP through capms's controllers, and their Ignition kubeadm configuration with the
//! kube-vip static pod on port 443 through the real kubeadm providers and the node stand-in.

use super::*;
use metal_api::types::IpAllocateRequest;

/// One of the Go provider's templates, as its users render it.
struct GoTemplate {
    file: &'static str,
    kubernetes_version: &'static str,
    /// Kinds left out of the rendering before it is applied, and why.
    left_out: &'static [&'static str],
    /// The Deployment in `kube-system` its ClusterResourceSet puts into the workload cluster.
    resource_set_deploys: Option<&'static str>,
    /// It writes Cluster API's objects in `v1beta1`.
    capi_v1beta1: bool,
    /// Cluster API refuses to make its worker's bootstrap configuration, with this message.
    worker_refused: Option<&'static str>,
}

impl GoTemplate {
    /// `file` for Kubernetes v1.33.5, applied whole.
    const fn named(file: &'static str) -> GoTemplate {
        GoTemplate {
            file,
            kubernetes_version: "v1.33.5",
            left_out: &[],
            resource_set_deploys: None,
            capi_v1beta1: false,
            worker_refused: None,
        }
    }
}

/// Cluster API's MachineSet says it cannot make the worker's bootstrap configuration: `refusal`.
async fn worker_refused_by_cluster_api(client: &kube::Client, ns: &str, refusal: &str) {
    let sets = capi(client, ns, "MachineSet");
    eventually(
        "the MachineSet to report why it makes no worker",
        Duration::from_secs(180),
        || async {
            let list = sets.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|s| s.data.to_string().contains(refusal))
                .then_some(())
        },
    )
    .await;
}

/// Cluster API core applied the template's ClusterResourceSet to the workload cluster.
async fn resource_set_applied(kubeconfig: &std::path::Path, deployment: &str) {
    let client = workload_client(kubeconfig).await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client, "kube-system");
    eventually(
        "the ClusterResourceSet's Deployment in the workload cluster",
        Duration::from_secs(180),
        || async { deployments.get_opt(deployment).await.ok().flatten() },
    )
    .await;
}

/// The Go provider's template, rendered for `ns` with the lab's values for its variables
/// (its `example_variables.rc` names them): one control-plane machine, one worker.
async fn render_go_template(
    cp: &ControlPlane,
    template: &GoTemplate,
    (ns, metal_api, control_plane_ip): (&str, &str, &str),
) -> String {
    let file = repo_root()
        .join("../shared/reference/capms-v0.8.0/clusterctl-templates")
        .join(template.file);
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
        // The metal-ccm the calico template deploys through a ClusterResourceSet.
        ("METAL_API_URL", metal_api),
        ("METAL_API_HMAC", "metal-edit"),
        ("METAL_API_HMAC_AUTH_TYPE", "Metal-Edit"),
    ];
    let version = template.kubernetes_version;
    let rendered = generate(cp, ns, &file, ("1", "1"), &variables, version).await;
    rendered
        .split("\n---\n")
        .filter(|doc| {
            !template
                .left_out
                .iter()
                .any(|kind| doc.contains(&format!("\nkind: {kind}\n")))
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_provider_s_template_reaches_running_unchanged() {
    let template = GoTemplate::named("cluster-template.yaml");
    reaches_running(&template).await;
}

/// The template for Kubernetes before 1.33 (the apiserver's `cloud-provider` flag).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_provider_s_pre_v1_33_template_reaches_running_unchanged() {
    let template = GoTemplate {
        kubernetes_version: "v1.32.9",
        ..GoTemplate::named("cluster-template-pre-v1.33.yaml")
    };
    reaches_running(&template).await;
}

/// The calico template: its ClusterResourceSet (metal-ccm) is applied by Cluster API core to
/// the workload cluster. Its HelmChartProxy (Calico) is left out: Cluster API's Helm addon
/// provider cannot be had here, the Go module proxy refuses it
/// (`sigs.k8s.io/cluster-api-addon-provider-helm: reading https://proxy.golang.org/…/@v/list:
/// 403 Forbidden`), and with it its CRD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_provider_s_calico_template_reaches_running_without_its_helm_chart() {
    let template = GoTemplate {
        left_out: &["HelmChartProxy"],
        resource_set_deploys: Some("cloud-controller-manager"),
        ..GoTemplate::named("cluster-template-calico.yaml")
    };
    reaches_running(&template).await;
}

/// The calico template for metal-stack's mini-lab, in Cluster API's `v1beta1`, which Cluster
/// API's managers convert. Its HelmChartProxy is left out as in the calico template. Its control
/// plane reaches Running; its worker does not, and not for capms: its KubeadmConfigTemplate's
/// `apiServer: {extraArgs: {}}` converts to an empty `apiServer`, which Cluster API v1.13's
/// `v1beta2` CRD refuses when the MachineSet clones the template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_provider_s_calico_lab_template_runs_its_control_plane() {
    let template = GoTemplate {
        left_out: &["HelmChartProxy"],
        resource_set_deploys: Some("cloud-controller-manager"),
        capi_v1beta1: true,
        worker_refused: Some(
            "spec.clusterConfiguration.apiServer in body should have at least 1 properties",
        ),
        ..GoTemplate::named("cluster-template-calico-lab.yaml")
    };
    reaches_running(&template).await;
}

async fn reaches_running(template: &GoTemplate) {
    let _one = ONE_AT_A_TIME.lock().await;
    let stack = Stack::start("go-template", Inventory::default_lab()).await;
    if template.capi_v1beta1 {
        stack.serve_capi_v1beta1();
    }
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
    let at = (
        stack.ns.name.as_str(),
        stack.sim.url.as_str(),
        ip.ipaddress.as_str(),
    );
    let rendered = render_go_template(cp, template, at).await;
    assert!(rendered.contains("infrastructure.cluster.x-k8s.io/v1alpha1"));
    let file = stack.work.path().join("go-cluster.yaml");
    std::fs::write(&file, rendered).expect("write");
    cp.kubectl(&["apply", "--server-side", "-f"], &[file]);

    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    let running = match template.worker_refused {
        Some(_) => 1,
        None => 2,
    };
    wait_running(client, ns, running, "the Go template's machines Running").await;
    if let Some(refusal) = template.worker_refused {
        worker_refused_by_cluster_api(client, ns, refusal).await;
    }
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
    assert_eq!(nodes.len(), running, "{nodes:?}");
    if let Some(deployment) = template.resource_set_deploys {
        resource_set_applied(&stack.kubeconfig(), deployment).await;
    }
    assert_eq!(
        allocated(&stack.sim, ns).len(),
        running + 1,
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
