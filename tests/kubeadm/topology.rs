//! A cluster made from the shipped ClusterClass by Cluster API's topology controller (the
//! ClusterTopology gate on): `clusterctl generate cluster --flavor topology` renders the class
//! and the Cluster from capms's release files, the Cluster reaches Running behind its ready
//! firewall, a version change rolls the control plane and then the workers, a machine-type
//! variable rolls the workers to the new size, and an image metal-api does not have is refused
//! by capms's admission when the topology controller writes it, naming the field and the valid
//! choices.

use super::ha::{NEW_VERSION, wait_rolled};
use super::*;

/// The size the workers change to.
const LARGE: &str = "v1-large-x86";

/// The default lab with two machines of a second size, `LARGE`.
fn inventory() -> Inventory {
    let mut inventory = Inventory::default_lab();
    let mut size = inventory.sizes[0].clone();
    (size.id, size.name) = (LARGE.to_owned(), LARGE.to_owned());
    inventory.sizes.push(size);
    let template = inventory.machines[0].clone();
    inventory
        .machines
        .extend((0..2).map(|i| metal_sim::inventory::MachineSpec {
            id: format!("00000000-0000-0000-0003-{i:012}"),
            size: LARGE.to_owned(),
            rack: "rack-3".to_owned(),
            ..template.clone()
        }));
    inventory
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_the_class_runs_upgrades_and_changes_its_workers() {
    let _one = ONE_AT_A_TIME.lock().await;
    let gate = ["--feature-gates=ClusterTopology=true"];
    let stack = Stack::start_with("kubeadm-class", inventory(), &gate).await;
    let rendered = render_flavor(&stack).await;
    for kind in [
        "ClusterClass",
        "MetalStackClusterTemplate",
        "KubeadmControlPlaneTemplate",
    ] {
        assert!(
            rendered.contains(&format!("kind: {kind}\n")),
            "{kind} rendered"
        );
    }
    let file = stack.work.path().join("cluster.yaml");
    std::fs::write(&file, rendered).expect("write");
    ControlPlane::shared().kubectl(&["apply", "--server-side", "-f"], &[file]);
    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    wait_running(
        client,
        ns,
        2,
        "the class's control plane and worker Running",
    )
    .await;
    wait_ready(client, ns, "every Machine Ready").await;
    firewall_serving(client, ns).await;
    firewall_booted_before_the_control_plane(&stack.sim, ns);

    set_topology(client, ns, |topology| {
        topology["version"] = json!(NEW_VERSION)
    })
    .await;
    control_plane_rolls_before_the_workers(client, ns).await;
    wait_rolled(client, ns, (false, 1), "the worker on the new version").await;

    let before = allocated(&stack.sim, ns).len();
    set_variable(client, ns, "workerMachineType", LARGE).await;
    workers_of_size(&stack.sim, ns, LARGE).await;
    wait_running(
        client,
        ns,
        2,
        "the control plane and the new worker Running",
    )
    .await;
    assert_eq!(
        allocated(&stack.sim, ns).len(),
        before,
        "the old worker freed"
    );

    an_unknown_image_is_refused(&stack, client, ns).await;
    a_cluster_in_an_unknown_partition_is_refused(&stack, client, ns).await;
    stack.delete_cluster().await;
}

/// The topology flavor, rendered by the real clusterctl from a local repository of capms's
/// release files (`--infrastructure metal-stack --flavor topology`), one control-plane machine
/// and one worker.
async fn render_flavor(stack: &Stack) -> String {
    let cp = ControlPlane::shared();
    let config = cp.capms_clusterctl_repository(&format!("{}-repository", stack.ns.name));
    let provider = format!("metal-stack:{}", support::clusterctl::capms_release());
    let variables = [
        ("METAL_PARTITION", "mini-lab"),
        ("METAL_PROJECT_ID", "00000000-0000-0000-0000-000000000001"),
        ("METAL_PUBLIC_NETWORK_ID", "internet-mini-lab"),
        ("CONTROL_PLANE_IP", CONTROL_PLANE_IP),
        ("METAL_CONTROL_PLANE_IMAGE", "ubuntu-26.4"),
        ("METAL_WORKER_IMAGE", "ubuntu-26.4"),
        ("METAL_API_URL", stack.sim.url.as_str()),
        ("METAL_API_HMAC", "metal-edit"),
    ];
    let config = config.to_string_lossy();
    let args = [
        "generate",
        "cluster",
        CLUSTER,
        "--config",
        &config,
        "--infrastructure",
        &provider,
        "--flavor",
        "topology",
        "--kubernetes-version",
        "v1.33.5",
        "--control-plane-machine-count",
        "1",
        "--worker-machine-count",
        "1",
        "--target-namespace",
        &stack.ns.name,
    ];
    let out = cp.clusterctl_with(&args, &variables).await;
    assert!(
        out.status.success(),
        "clusterctl generate cluster --flavor topology: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The cluster's MetalStackCluster, which the class names after the Cluster, is ready, a
/// firewall serving its network.
async fn firewall_serving(client: &kube::Client, ns: &str) {
    let clusters = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1alpha4",
            "MetalStackCluster",
        )),
    );
    eventually(
        "the MetalStackCluster ready, its firewall serving",
        LOADED_MACHINE_WAIT,
        || async {
            // Named after the Cluster by the class, as metal-ccm's cluster tag needs it.
            let cluster = clusters.get_opt(CLUSTER).await.ok()??;
            let status = &cluster.data["status"];
            (status["ready"] == json!(true) && status["firewall"]["serving"].is_string())
                .then_some(())
        },
    )
    .await;
}

/// Changes the Cluster's `spec.topology` with `change`.
async fn set_topology(
    client: &kube::Client,
    ns: &str,
    change: impl FnOnce(&mut serde_json::Value),
) {
    let clusters = capi(client, ns, "Cluster");
    let cluster = clusters.get(CLUSTER).await.expect("the Cluster");
    let mut topology = cluster.data["spec"]["topology"].clone();
    change(&mut topology);
    let patch = json!({"spec": {"topology": topology}});
    clusters
        .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("change the Cluster's topology");
}

/// Sets the Cluster's variable `name` to `value`.
async fn set_variable(client: &kube::Client, ns: &str, name: &str, value: &str) {
    set_topology(client, ns, |topology| {
        let variables = topology["variables"].as_array_mut().expect("variables");
        let variable = variables
            .iter_mut()
            .find(|v| v["name"] == name)
            .expect("the variable");
        variable["value"] = json!(value);
    })
    .await;
}

/// Waits until the control-plane machine runs `NEW_VERSION`, checking at every look that no
/// worker got it first: Cluster API upgrades the workers only after the control plane.
async fn control_plane_rolls_before_the_workers(client: &kube::Client, ns: &str) {
    eventually(
        "the control plane on the new version",
        Duration::from_secs(420),
        || async {
            let ms = machines(client, ns).await;
            let (control_plane, workers): (Vec<_>, Vec<_>) =
                ms.iter().partition(|m| m.control_plane);
            let rolled = control_plane.len() == 1
                && control_plane.iter().all(|m| {
                    m.version == NEW_VERSION && m.phase == "Running" && !m.node.is_empty()
                });
            if !rolled {
                assert!(
                    workers.iter().all(|m| m.version != NEW_VERSION),
                    "a worker took the new version before the control plane: {ms:?}"
                );
            }
            rolled.then_some(())
        },
    )
    .await;
}

/// Waits until the cluster's one worker is a machine of `size` in the simulator.
async fn workers_of_size(sim: &RunningSim, ns: &str, size: &str) {
    let tag = format!("cluster.metal-stack.io/id={ns}.{CLUSTER}");
    eventually(
        "the worker on the new size",
        Duration::from_secs(420),
        || async {
            let state = sim.sim.state();
            let workers: Vec<_> = state
                .machines
                .values()
                .filter(|m| m.tags.contains(&tag))
                .filter(|m| {
                    m.allocation
                        .as_ref()
                        .is_some_and(|a| a.hostname.contains("-worker-"))
                })
                .collect();
            (workers.len() == 1 && workers[0].size == size).then_some(())
        },
    )
    .await;
}

/// A worker image metal-api does not have: the topology controller's write of the workers'
/// new template is refused by capms's admission, the Cluster's `TopologyReconciled` condition
/// says why (the field and the valid images), and nothing is allocated or freed.
async fn an_unknown_image_is_refused(stack: &Stack, client: &kube::Client, ns: &str) {
    let before = allocated(&stack.sim, ns);
    set_variable(client, ns, "workerImage", "ubuntu-99.9").await;
    let message = topology_refused(client, ns, CLUSTER).await;
    assert!(
        message.contains("spec.template.spec.image: image \"ubuntu-99.9\" does not resolve")
            && message.contains("valid machine images: ")
            && message.contains("ubuntu-26.4"),
        "{message}"
    );
    assert_eq!(
        allocated(&stack.sim, ns),
        before,
        "nothing allocated or freed"
    );
}

/// A second Cluster of the class in a partition metal-api does not have: capms refuses its
/// MetalStackCluster when the topology controller writes it, the Cluster's condition names the
/// field and the valid partitions, and nothing is allocated.
async fn a_cluster_in_an_unknown_partition_is_refused(
    stack: &Stack,
    client: &kube::Client,
    ns: &str,
) {
    let before = allocated(&stack.sim, ns);
    let clusters = capi(client, ns, "Cluster");
    let cluster = clusters.get(CLUSTER).await.expect("the Cluster");
    let mut topology = cluster.data["spec"]["topology"].clone();
    for variable in topology["variables"].as_array_mut().expect("variables") {
        match variable["name"].as_str() {
            Some("partition") => variable["value"] = json!("nowhere"),
            Some("workerImage") => variable["value"] = json!("ubuntu-26.4"),
            _ => {}
        }
    }
    let name = "elsewhere";
    let elsewhere: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterNetwork": cluster.data["spec"]["clusterNetwork"], "topology": topology},
    }))
    .expect("a Cluster");
    clusters
        .create(&Default::default(), &elsewhere)
        .await
        .expect("the Cluster is accepted: its variables are well-formed");
    let message = topology_refused(client, ns, name).await;
    assert!(
        message.contains(
            "spec.partition: partition \"nowhere\" does not exist in metal-api; valid: mini-lab"
        ),
        "{message}"
    );
    assert_eq!(allocated(&stack.sim, ns), before, "nothing allocated");
    clusters
        .delete(name, &DeleteParams::foreground())
        .await
        .expect("delete the refused Cluster");
}

/// Waits until Cluster `name`'s `TopologyReconciled` condition is False; returns its message.
async fn topology_refused(client: &kube::Client, ns: &str, name: &str) -> String {
    let clusters = capi(client, ns, "Cluster");
    eventually(
        "the Cluster to say why its topology is not applied",
        LOADED_MACHINE_WAIT,
        || async {
            let cluster = clusters.get(name).await.ok()?;
            let conditions = cluster.data["status"]["conditions"].as_array()?.clone();
            let reconciled = conditions
                .iter()
                .find(|c| c["type"] == "TopologyReconciled")?;
            let message = reconciled["message"].as_str().unwrap_or("").to_owned();
            (reconciled["status"] == "False").then_some(message)
        },
    )
    .await
}
