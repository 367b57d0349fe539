//! Three control-plane machines spread over racks by Cluster API (the racks capms reports as
//! failure domains), one of them remediated on its own machine, and a Kubernetes version change
//! that rolls every machine through capms within the surge.

use super::*;
/// The simulator's default inventory with `count` machines of its one size over three racks.
fn inventory(count: usize) -> Inventory {
    let mut inventory = Inventory::default_lab();
    let template = inventory.machines[0].clone();
    inventory.machines = (0..count)
        .map(|i| metal_sim::inventory::MachineSpec {
            id: format!("00000000-0000-0000-0002-{i:012}"),
            rack: format!("rack-{}", i % 3 + 1),
            ..template.clone()
        })
        .collect();
    inventory
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_control_plane_machines_roll_to_a_new_version_within_the_surge() {
    let _one = ONE_AT_A_TIME.lock().await;
    // Four machines a rack: a rack holding a control-plane machine, the firewall and the worker
    // still has one for the machine Cluster API places there in a rollout.
    let stack = Stack::start("kubeadm-ha", inventory(12)).await;
    stack.apply_cluster(Some("ignition"), "3", "1").await;
    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    wait_running(
        client,
        ns,
        4,
        "three control-plane machines and a worker Running",
    )
    .await;
    wait_ready(
        client,
        ns,
        "every Machine Ready: three healthy etcd members",
    )
    .await;
    let racks = control_plane_racks(&stack.sim, ns);
    assert_eq!(
        racks.len(),
        3,
        "the control plane spread over the three racks"
    );
    let placed = control_plane_failure_domains(client, ns).await;
    let chosen: std::collections::BTreeSet<String> =
        placed.iter().filter_map(|(spec, _)| spec.clone()).collect();
    assert_eq!(
        chosen, racks,
        "Cluster API placed each control-plane Machine in a rack of its own, and there it is: {placed:?}"
    );
    assert!(
        placed
            .iter()
            .all(|(spec, status)| spec.is_some() && spec == status),
        "each Machine shows the rack it was placed in: {placed:?}"
    );
    assert_eq!(
        bootstrap_formats(&stack.sim, ns),
        ["ignition"].into(),
        "the ignition flavor's machines boot from Ignition"
    );
    super::remediation::a_control_plane_machine_comes_back_on_its_machine(&stack).await;
    let before: Vec<String> = allocated(&stack.sim, ns)
        .into_iter()
        .map(|(_, hostname, _)| hostname)
        .collect();

    let peak = Peak::watch(&stack.sim, ns);
    upgrade(client, ns).await;
    wait_ready(client, ns, "every new Machine Ready").await;
    let (control_planes, workers) = peak.stop();
    assert!(
        control_planes <= 4,
        "at most one control-plane machine over three: {control_planes}"
    );
    assert!(workers <= 2, "at most one worker over one: {workers}");
    let after = allocated(&stack.sim, ns);
    assert_eq!(
        after.len(),
        5,
        "firewall, three control-plane machines, a worker: {after:?}"
    );
    let kept = after
        .iter()
        .filter(|(_, hostname, firewall)| !firewall && before.contains(hostname))
        .count();
    assert_eq!(
        kept, 0,
        "every machine but the firewall is a new allocation: {after:?}"
    );
    let nodes = workload_nodes(&stack.kubeconfig()).await;
    assert_eq!(
        nodes.len(),
        4,
        "the old machines' Nodes are gone: {nodes:?}"
    );
    stack.delete_cluster().await;
}

pub(super) const NEW_VERSION: &str = "v1.33.6";

/// Changes the control plane's version, waits until every control-plane machine is replaced,
/// then does the same for the workers.
async fn upgrade(client: &kube::Client, ns: &str) {
    let kcp = format!("{CLUSTER}-control-plane");
    api(
        client,
        ns,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
    )
    .patch(
        &kcp,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"version": NEW_VERSION}})),
    )
    .await
    .expect("upgrade the control plane");
    wait_rolled(
        client,
        ns,
        (true, 3),
        "every control-plane machine replaced",
    )
    .await;
    capi(client, ns, "MachineDeployment")
        .patch(
            &format!("{CLUSTER}-worker"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"version": NEW_VERSION}}}})),
        )
        .await
        .expect("upgrade the workers");
    wait_rolled(client, ns, (false, 1), "the worker replaced").await;
}

/// The racks of the cluster's allocated control-plane machines.
fn control_plane_racks(sim: &RunningSim, ns: &str) -> std::collections::BTreeSet<String> {
    let tag = format!("cluster.metal-stack.io/id={ns}.{CLUSTER}");
    sim.sim
        .state()
        .machines
        .values()
        .filter(|m| m.tags.contains(&tag))
        .filter(|m| {
            m.allocation
                .as_ref()
                .is_some_and(|a| a.hostname.contains("-control-plane-"))
        })
        .map(|m| m.rack.clone())
        .collect()
}

/// Each control-plane Machine's failure domain: the one Cluster API placed it in, and the one
/// its status shows (capms's report of its machine's rack).
async fn control_plane_failure_domains(
    client: &kube::Client,
    ns: &str,
) -> Vec<(Option<String>, Option<String>)> {
    let list = capi(client, ns, "Machine").list(&Default::default()).await;
    let items = list.map(|l| l.items).unwrap_or_default();
    let control_plane = |m: &&kube::api::DynamicObject| {
        let labels = m.metadata.labels.as_ref();
        labels.is_some_and(|l| l.contains_key("cluster.x-k8s.io/control-plane"))
    };
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    items
        .iter()
        .filter(control_plane)
        .map(|m| {
            (
                text(&m.data["spec"]["failureDomain"]),
                text(&m.data["status"]["failureDomain"]),
            )
        })
        .collect()
}

/// The bootstrap data formats the cluster's Kubernetes machines were allocated with.
fn bootstrap_formats(sim: &RunningSim, ns: &str) -> std::collections::BTreeSet<&'static str> {
    use base64::Engine;
    let tag = format!("cluster.metal-stack.io/id={ns}.{CLUSTER}");
    let state = sim.sim.state();
    let kubernetes = state
        .machines
        .values()
        .filter(|m| m.tags.contains(&tag))
        .filter_map(|m| m.allocation.as_ref())
        .filter(|a| a.role != "firewall");
    kubernetes
        .map(|a| {
            // As metal-hammer reads it: base64, or verbatim when it is not.
            let data = base64::engine::general_purpose::STANDARD
                .decode(a.user_data.trim())
                .unwrap_or_else(|_| a.user_data.clone().into_bytes());
            match serde_json::from_slice::<serde_json::Value>(&data) {
                Ok(config) if config.pointer("/ignition/version").is_some() => "ignition",
                _ if data.starts_with(b"## template: jinja\n#cloud-config") => "cloud-config",
                _ => "other",
            }
        })
        .collect()
}

/// Waits until the control plane's (or the workers') Machines are `want`, all running
/// `NEW_VERSION`, Running with their Nodes, and no old one is left.
pub(super) async fn wait_rolled(
    client: &kube::Client,
    ns: &str,
    (control_plane, want): (bool, usize),
    what: &str,
) {
    eventually(what, Duration::from_secs(420), || async {
        let ms: Vec<_> = machines(client, ns)
            .await
            .into_iter()
            .filter(|m| m.control_plane == control_plane)
            .collect();
        (ms.len() == want
            && ms
                .iter()
                .all(|m| m.version == NEW_VERSION && m.phase == "Running" && !m.node.is_empty()))
        .then_some(())
    })
    .await;
}

/// The most control-plane machines and workers allocated at once while it watches.
struct Peak {
    stop: tokio::sync::oneshot::Sender<()>,
    seen: std::sync::Arc<std::sync::Mutex<(usize, usize)>>,
}

impl Peak {
    fn watch(sim: &RunningSim, ns: &str) -> Peak {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let seen: std::sync::Arc<std::sync::Mutex<(usize, usize)>> = Default::default();
        let (sim, ns, shared) = (sim.sim.clone(), ns.to_owned(), seen.clone());
        tokio::spawn(async move {
            while stopped.try_recv().is_err() {
                let tag = format!("cluster.metal-stack.io/id={ns}.{CLUSTER}");
                let names: Vec<String> = sim
                    .state()
                    .machines
                    .values()
                    .filter(|m| m.tags.contains(&tag))
                    .filter_map(|m| m.allocation.as_ref().map(|a| a.hostname.clone()))
                    .collect();
                let cps = names
                    .iter()
                    .filter(|n| n.contains("-control-plane-"))
                    .count();
                let workers = names.iter().filter(|n| n.contains("-worker-")).count();
                if let Ok(mut peak) = shared.lock() {
                    *peak = (peak.0.max(cps), peak.1.max(workers));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Peak { stop, seen }
    }

    fn stop(self) -> (usize, usize) {
        let _ = self.stop.send(());
        *self.seen.lock().expect("peak")
    }
}
