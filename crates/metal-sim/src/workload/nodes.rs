//! What a machine's kubelet (and metal-ccm) make visible in the workload cluster, as far as
//! Cluster API and the kubeadm control-plane provider look at it: a Node named after the
//! allocation's hostname, with the providerID capms reported (`metal://<partition>/<machine id>`,
//! as metal-ccm sets it), its address and kubelet version, `Ready=True`; on control-plane
//! machines also the mirror pods of the static pods `kubeadm` writes (API server, controller
//! manager, scheduler, etcd), running and ready. A freed machine's Node and pods go away.
//! Cluster API matches Machines to Nodes by providerID and sets their `nodeRef`, so Machines
//! reach `Running`.

use super::Sim;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use metal_api::ProviderId;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// The label on every Node and pod the stand-in manages; it deletes only objects that carry it.
pub const MANAGED_LABEL: &str = "sim.capms.metal-stack.io/node-agent";

/// The static pods of a kubeadm control-plane node, by component.
pub const CONTROL_PLANE_COMPONENTS: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// What the agent failed to do in the workload cluster.
#[derive(Debug, thiserror::Error)]
#[error("node agent: {operation:?} {object}: {source}")]
pub struct NodeAgentError {
    pub operation: Operation,
    pub object: String,
    #[source]
    pub source: kube::Error,
}

/// The workload-cluster operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    List,
    Create,
    SetReady,
    Delete,
}

/// A Node one machine's kubelet registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedNode {
    pub provider_id: String,
    /// The machine's address in the cluster's private network.
    pub address: Option<String>,
    /// A kubeadm control-plane machine: labelled and tainted so, with mirror pods.
    pub control_plane: bool,
    /// The kubelet's version (the cluster's Kubernetes version), if known.
    pub version: Option<String>,
    /// The kubelet runs and posts its status: `Ready=True`. A machine that hangs, is powered
    /// off or reboots wants its Node `NotReady` (`Ready=Unknown`, as the node lifecycle
    /// controller marks a Node whose kubelet stopped posting), and keeps it.
    pub ready: bool,
    /// The `bootID` the kubelet reports: new with every boot of the machine.
    pub boot_id: String,
}

/// Machines of the cluster tagged `cluster_tag` (`cluster.metal-stack.io/id=<ns>.<name>`) that
/// phoned home, as plain worker Nodes: Node name (the allocation's hostname) → Node.
pub fn phoned_home(sim: &Sim, cluster_tag: &str) -> BTreeMap<String, WantedNode> {
    let state = sim.state();
    let cluster = cluster_tag.split_once('=').map(|(_, id)| id);
    state
        .machines
        .values()
        .filter(|m| cluster.is_some_and(|c| m.cluster_id() == Some(c)))
        .filter_map(|m| {
            let allocation = booted_allocation(m)?;
            let node = WantedNode {
                provider_id: ProviderId::format(&m.partition, &m.id),
                address: private_address(allocation),
                control_plane: false,
                version: None,
                ready: state.kubelet_running(m),
                boot_id: boot_id(&m.id, m.power.generation),
            };
            Some((allocation.hostname.clone(), node))
        })
        .collect()
}

/// The allocation of a machine that phoned home at least once in it: its Node stays while the
/// machine reboots or hangs.
pub fn booted_allocation(
    m: &crate::state::MachineRecord,
) -> Option<&metal_api::types::MachineAllocation> {
    m.allocation
        .as_ref()
        .filter(|a| m.phoned_home_in.as_deref() == Some(a.allocationuuid.as_str()))
}

/// A kubelet's `bootID` for boot `generation` of `machine`: UUID-shaped like the kernel's, and
/// the same for the same boot, so an unchanged Node is not written again.
pub fn boot_id(machine: &str, generation: u64) -> String {
    // FNV-1a: stable across runs, unlike std's hasher.
    let hash = machine.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    uuid::Uuid::from_u64_pair(hash, generation).to_string()
}

/// The machine's first address in a private network of its allocation.
pub fn private_address(allocation: &metal_api::types::MachineAllocation) -> Option<String> {
    allocation
        .networks
        .iter()
        .filter(|n| n.private)
        .find_map(|n| n.ips.first().cloned())
}

/// Brings the workload cluster's Nodes (and control-plane mirror pods) in line with `wanted`:
/// creates the missing ones, marks them ready or not ready, deletes those no machine wants. A
/// Node already as wanted is not written.
pub async fn sync(
    workload: &kube::Client,
    wanted: &BTreeMap<String, WantedNode>,
) -> Result<(), NodeAgentError> {
    let nodes: Api<Node> = Api::all(workload.clone());
    let present = nodes
        .list(&ListParams::default().labels(MANAGED_LABEL))
        .await
        .map_err(fail(Operation::List, "nodes"))?;
    let mut have = BTreeMap::new();
    for node in present.items {
        let name = node.metadata.name.clone().unwrap_or_default();
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
        if wanted.get(&name).map(|w| &w.provider_id) == provider_id.as_ref() {
            have.insert(name, node);
            continue;
        }
        delete_node(workload, &name).await?;
    }
    for (name, want) in wanted {
        if !have.contains_key(name) {
            nodes
                .create(&PostParams::default(), &node(name, want))
                .await
                .map_err(fail(Operation::Create, name))?;
        }
        let present = have.get(name);
        if let Some(status) = status_change(present, want) {
            nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
                .await
                .map_err(fail(Operation::SetReady, name))?;
        }
        if want.control_plane {
            mirror_pods(workload, name, want).await?;
        }
    }
    Ok(())
}

fn fail(operation: Operation, object: &str) -> impl FnOnce(kube::Error) -> NodeAgentError {
    let object = object.to_owned();
    move |source| NodeAgentError {
        operation,
        object,
        source,
    }
}

/// Deletes a Node and its mirror pods (no garbage collector runs in the stand-in).
async fn delete_node(workload: &kube::Client, name: &str) -> Result<(), NodeAgentError> {
    let pods: Api<Pod> = Api::namespaced(workload.clone(), "kube-system");
    for component in CONTROL_PLANE_COMPONENTS {
        let pod = format!("{component}-{name}");
        match pods.delete(&pod, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(fail(Operation::Delete, &pod)(e)),
        }
    }
    Api::<Node>::all(workload.clone())
        .delete(name, &DeleteParams::default())
        .await
        .map_err(fail(Operation::Delete, name))?;
    Ok(())
}

/// The control-plane static pods' mirror pods on `node`, running and ready.
async fn mirror_pods(
    workload: &kube::Client,
    node: &str,
    want: &WantedNode,
) -> Result<(), NodeAgentError> {
    let pods: Api<Pod> = Api::namespaced(workload.clone(), "kube-system");
    for component in CONTROL_PLANE_COMPONENTS {
        let name = format!("{component}-{node}");
        let existing = pods
            .get_opt(&name)
            .await
            .map_err(fail(Operation::List, &name))?;
        if existing.as_ref().is_some_and(pod_ready) {
            continue;
        }
        if existing.is_none() {
            pods.create(&PostParams::default(), &mirror_pod(component, node, want))
                .await
                .map_err(fail(Operation::Create, &name))?;
        }
        pods.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(pod_running(component)),
        )
        .await
        .map_err(fail(Operation::SetReady, &name))?;
    }
    Ok(())
}

/// Runs [`sync`] for the plain worker Nodes of [`phoned_home`] of the clusters tagged
/// `cluster_tags` every `period` until the task is aborted, logging what fails (a workload API
/// without kubeadm). One task serves clusters that share a workload API: each sync deletes the
/// managed Nodes it was not given.
pub fn spawn(
    sim: Sim,
    cluster_tags: Vec<String>,
    workload: kube::Client,
    period: Duration,
) -> tokio::task::JoinHandle<()> {
    let agent = format!("the clusters {cluster_tags:?}");
    spawn_with(workload, period, agent, move || {
        let wanted = cluster_tags.iter().flat_map(|t| phoned_home(&sim, t));
        wanted.collect()
    })
}

/// Runs [`sync`] for the Nodes `wanted` gives, every `period` until the task is aborted,
/// logging what fails with the `agent` it is.
pub fn spawn_with(
    workload: kube::Client,
    period: Duration,
    agent: String,
    wanted: impl Fn() -> BTreeMap<String, WantedNode> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(error) = sync(&workload, &wanted()).await {
                tracing::warn!(%error, %agent, "node agent");
            }
            tokio::time::sleep(period).await;
        }
    })
}

fn node(name: &str, want: &WantedNode) -> Node {
    let mut labels = json!({
        MANAGED_LABEL: "true",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    });
    let mut taints = json!([]);
    if want.control_plane {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
        taints = json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": want.provider_id, "taints": taints},
    }))
    .unwrap_or_default()
}

/// The status patch that makes `present` (none yet: a new Node) as `want`ed, if it is not.
fn status_change(present: Option<&Node>, want: &WantedNode) -> Option<serde_json::Value> {
    let status = present.and_then(|n| n.status.as_ref());
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let ready = conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str());
    let boot_id = status
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.as_str());
    if want.ready {
        let current = ready == Some("True") && boot_id == Some(want.boot_id.as_str());
        (!current).then(|| node_status(want))
    } else {
        (ready != Some("Unknown")).then(|| not_ready(conditions))
    }
}

/// What the node lifecycle controller writes when a kubelet stops posting: every condition
/// `Unknown`, the last heartbeat kept. Addresses and node info stay as the kubelet left them.
fn not_ready(conditions: &[k8s_openapi::api::core::v1::NodeCondition]) -> serde_json::Value {
    let now = jiff::Timestamp::now().to_string();
    let heartbeat = |kind: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == kind)
            .and_then(|c| c.last_heartbeat_time.as_ref())
            .map_or_else(|| now.clone(), |t| t.0.to_string())
    };
    let unknown: Vec<serde_json::Value> =
        ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"]
            .iter()
            .map(|kind| {
                json!({"type": kind, "status": "Unknown", "reason": "NodeStatusUnknown",
                   "message": "Kubelet stopped posting node status.",
                   "lastHeartbeatTime": heartbeat(kind), "lastTransitionTime": now})
            })
            .collect();
    json!({"status": {"conditions": unknown}})
}

fn node_status(want: &WantedNode) -> serde_json::Value {
    let mut addresses = vec![];
    if let Some(ip) = &want.address {
        addresses.push(json!({"type": "InternalIP", "address": ip}));
    }
    json!({"status": {
        "conditions": node_conditions(),
        "addresses": addresses,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "kubeletVersion": want.version.clone().unwrap_or_default(),
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
            "osImage": "metal-stack image (played by the simulator)", "kernelVersion": "",
            "containerRuntimeVersion": "", "machineID": "", "systemUUID": "", "bootID": want.boot_id,
        },
    }})
}

/// What a healthy kubelet reports: Ready, and no memory, disk or PID pressure (Cluster API's
/// NodeHealthy summarises all four).
fn node_conditions() -> serde_json::Value {
    let now = jiff::Timestamp::now().to_string();
    let pressure = |kind: &str, reason: &str| {
        json!({"type": format!("{kind}Pressure"), "status": "False", "reason": reason,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!([
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "kubelet is posting ready status (node stand-in of the metal-api simulator)",
         "lastHeartbeatTime": now, "lastTransitionTime": now},
        pressure("Memory", "KubeletHasSufficientMemory"),
        pressure("Disk", "KubeletHasNoDiskPressure"),
        pressure("PID", "KubeletHasSufficientPID"),
    ])
}

fn mirror_pod(component: &str, node: &str, want: &WantedNode) -> Pod {
    let version = want.version.clone().unwrap_or_else(|| "latest".into());
    let image = match component {
        "etcd" => "registry.k8s.io/etcd:3.6.8-0".to_owned(),
        _ => format!("registry.k8s.io/{component}:{version}"),
    };
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{component}-{node}"),
            "namespace": "kube-system",
            "labels": {"component": component, "tier": "control-plane", MANAGED_LABEL: "true"},
            "annotations": {
                "kubernetes.io/config.mirror": format!("{component}-{node}"),
                "kubernetes.io/config.source": "file",
            },
        },
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "containers": [{"name": component, "image": image}],
        },
    }))
    .unwrap_or_default()
}

fn pod_running(component: &str) -> serde_json::Value {
    let now = jiff::Timestamp::now().to_string();
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    let conditions = ["PodScheduled", "Initialized", "ContainersReady", "Ready"].map(condition);
    json!({"status": {
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": [{
            "name": component, "ready": true, "restartCount": 0, "image": "", "imageID": "",
            "state": {"running": {"startedAt": now}},
        }],
    }})
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests;
