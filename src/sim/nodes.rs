//! The node agent: what a phoned-home machine's kubelet (and metal-ccm) make visible in the
//! workload cluster, as far as Cluster API looks at it. For every machine of one cluster that
//! phoned home, it keeps a Node named after the allocation's hostname, with the providerID capms
//! reported (`metal://<partition>/<machine id>`, as metal-ccm sets it) and `Ready=True`; a freed
//! machine's Node goes away. Cluster API matches Machines to Nodes by that providerID and sets
//! their `nodeRef`, so Machines reach `Running`.
//!
//! Part of the local stand-in for metal-stack, like the simulator, never of the provider. It
//! reads the simulator's state in-process, so it adds nothing to the simulator's request counts:
//! those stay capms' own.

use super::Sim;
use crate::api::common::ProviderId;
use crate::metal::types::event;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

/// The label on every Node the agent manages; it deletes only Nodes that carry it.
pub const MANAGED_LABEL: &str = "sim.capms.metal-stack.io/node-agent";

/// What the agent failed to do in the workload cluster.
#[derive(Debug, thiserror::Error)]
#[error("node agent: {operation:?} node {node}: {source}")]
pub struct NodeAgentError {
    pub operation: Operation,
    pub node: String,
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

/// Machines of the cluster tagged `cluster_tag` (`cluster.metal-stack.io/id=<ns>.<name>`) that
/// phoned home: Node name (the allocation's hostname) → providerID.
pub fn phoned_home(sim: &Sim, cluster_tag: &str) -> BTreeMap<String, String> {
    let state = sim.state();
    state
        .machines
        .values()
        .filter(|m| m.tags.iter().any(|t| t == cluster_tag))
        .filter(|m| {
            m.events
                .first()
                .is_some_and(|e| e.event == event::PHONED_HOME)
        })
        .filter_map(|m| {
            let allocation = m.allocation.as_ref()?;
            Some((
                allocation.hostname.clone(),
                ProviderId::format(&m.partition, &m.id),
            ))
        })
        .collect()
}

/// Brings the workload cluster's Nodes in line with the machines that phoned home: creates the
/// missing ones (Ready), deletes those whose machine is gone.
pub async fn sync(
    sim: &Sim,
    cluster_tag: &str,
    workload: &kube::Client,
) -> Result<(), NodeAgentError> {
    let wanted = phoned_home(sim, cluster_tag);
    let nodes: Api<Node> = Api::all(workload.clone());
    let fail = |operation, node: &str| {
        let node = node.to_owned();
        move |source| NodeAgentError {
            operation,
            node,
            source,
        }
    };
    let present = nodes
        .list(&ListParams::default().labels(MANAGED_LABEL))
        .await
        .map_err(fail(Operation::List, "*"))?;
    let mut have = BTreeMap::new();
    for node in present.items {
        let name = node.metadata.name.clone().unwrap_or_default();
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
        if wanted.get(&name) == provider_id.as_ref() {
            have.insert(name, node);
            continue;
        }
        nodes
            .delete(&name, &DeleteParams::default())
            .await
            .map_err(fail(Operation::Delete, &name))?;
    }
    for (name, provider_id) in &wanted {
        if !have.contains_key(name) {
            nodes
                .create(&PostParams::default(), &node(name, provider_id))
                .await
                .map_err(fail(Operation::Create, name))?;
        }
        let ready = have.get(name).is_some_and(is_ready);
        if !ready {
            nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(ready_status()))
                .await
                .map_err(fail(Operation::SetReady, name))?;
        }
    }
    Ok(())
}

/// Runs [`sync`] every `period` until the task is aborted, logging what fails.
pub fn spawn(
    sim: Sim,
    cluster_tag: String,
    workload: kube::Client,
    period: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(error) = sync(&sim, &cluster_tag, &workload).await {
                tracing::warn!(%error, cluster = %cluster_tag, "node agent");
            }
            tokio::time::sleep(period).await;
        }
    })
}

fn node(name: &str, provider_id: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {
            MANAGED_LABEL: "true",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
        }},
        "spec": {"providerID": provider_id},
    }))
    .unwrap_or_default()
}

fn ready_status() -> serde_json::Value {
    serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "kubelet is posting ready status (node agent of the metal-api simulator)",
    }]}})
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metal::types::{MachineAllocation, MachineEvent};

    const TAG: &str = "cluster.metal-stack.io/id=ns.c";

    fn sim() -> Sim {
        Sim::new(
            &super::super::Inventory::default_lab(),
            super::super::SimConfig::default(),
        )
        .unwrap_or_else(|e| panic!("sim: {e}"))
    }

    /// Allocates machine `id` as `hostname` with `tags` and `last_event` on top of its log.
    fn allocate(sim: &Sim, id: &str, hostname: &str, tags: &[&str], last_event: &str) {
        let mut state = sim.state();
        let m = state
            .machines
            .get_mut(id)
            .unwrap_or_else(|| panic!("machine {id}"));
        m.allocation = Some(MachineAllocation {
            hostname: hostname.into(),
            ..Default::default()
        });
        m.tags = tags.iter().map(|t| (*t).to_owned()).collect();
        m.events.insert(
            0,
            MachineEvent {
                event: last_event.into(),
                ..Default::default()
            },
        );
    }

    #[test]
    fn only_phoned_home_machines_of_the_cluster_get_a_node() {
        let sim = sim();
        let id = |n: u8| format!("00000000-0000-0000-0000-00000000000{n}");
        allocate(&sim, &id(1), "worker-a", &[TAG], event::PHONED_HOME);
        allocate(&sim, &id(2), "worker-b", &[TAG], event::INSTALLING);
        allocate(
            &sim,
            &id(3),
            "other",
            &["cluster.metal-stack.io/id=ns.d"],
            event::PHONED_HOME,
        );
        let nodes = phoned_home(&sim, TAG);
        assert_eq!(
            nodes,
            BTreeMap::from([("worker-a".to_owned(), format!("metal://mini-lab/{}", id(1)))])
        );
        sim.state()
            .machines
            .get_mut(&id(1))
            .unwrap_or_else(|| panic!("machine"))
            .allocation = None;
        assert!(
            phoned_home(&sim, TAG).is_empty(),
            "a freed machine has no node"
        );
    }
}
