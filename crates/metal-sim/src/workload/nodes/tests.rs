use super::*;
use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use metal_api::types::{MachineAllocation, PowerAction, event};

const TAG: &str = "cluster.metal-stack.io/id=ns.c";

fn sim() -> Sim {
    Sim::new(
        &crate::inventory::Inventory::default_lab(),
        crate::SimConfig::default(),
    )
    .unwrap_or_else(|e| panic!("sim: {e}"))
}

fn id(n: u8) -> String {
    format!("00000000-0000-0000-0000-00000000000{n}")
}

/// Allocates machine `id` as `hostname` with `tags`, then lets it send `events`.
fn allocate(sim: &Sim, id: &str, hostname: &str, tags: &[&str], events: &[&str]) {
    let mut state = sim.state();
    let m = state
        .machines
        .get_mut(id)
        .unwrap_or_else(|| panic!("machine {id}"));
    m.allocation = Some(MachineAllocation {
        allocationuuid: format!("allocation-of-{hostname}"),
        hostname: hostname.into(),
        ..Default::default()
    });
    m.tags = tags.iter().map(|t| (*t).to_owned()).collect();
    for event in events {
        state.push_event(id, event, "");
    }
}

#[test]
fn only_phoned_home_machines_of_the_cluster_get_a_node() {
    let sim = sim();
    allocate(&sim, &id(1), "worker-a", &[TAG], &[event::PHONED_HOME]);
    allocate(&sim, &id(2), "worker-b", &[TAG], &[event::INSTALLING]);
    let other = ["cluster.metal-stack.io/id=ns.d"];
    allocate(&sim, &id(3), "other", &other, &[event::PHONED_HOME]);
    let nodes = phoned_home(&sim, TAG);
    let ids: BTreeMap<_, _> = nodes
        .iter()
        .map(|(name, node)| (name.clone(), node.provider_id.clone()))
        .collect();
    assert_eq!(
        ids,
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

#[test]
fn a_machine_allocated_through_v2_is_of_the_cluster_its_allocation_s_label_names() {
    let sim = sim();
    allocate(&sim, &id(1), "worker-v2", &[], &[event::PHONED_HOME]);
    let (key, cluster) = TAG.split_once('=').unwrap_or_else(|| panic!("{TAG}"));
    sim.state()
        .machines
        .get_mut(&id(1))
        .unwrap_or_else(|| panic!("machine"))
        .allocation_labels = [(key.to_owned(), cluster.to_owned())].into();
    let nodes = phoned_home(&sim, TAG);
    assert_eq!(nodes.keys().collect::<Vec<_>>(), ["worker-v2"]);
    assert!(phoned_home(&sim, "cluster.metal-stack.io/id=ns.d").is_empty());
}

#[test]
fn a_rebooting_off_or_hung_machine_keeps_its_node_not_ready_and_a_reboot_changes_the_boot_id() {
    let sim = sim();
    allocate(&sim, &id(1), "worker-a", &[TAG], &[event::PHONED_HOME]);
    let node = |sim: &Sim| {
        phoned_home(sim, TAG)
            .remove("worker-a")
            .unwrap_or_else(|| panic!("worker-a keeps its node"))
    };
    let first = node(&sim);
    assert!(first.ready);
    let power = |sim: &Sim, action| {
        sim.state()
            .machine_power(&id(1), action, "")
            .unwrap_or_else(|e| panic!("{action:?}: {e:?}"));
    };
    power(&sim, PowerAction::Cycle);
    let rebooting = node(&sim);
    assert!(!rebooting.ready, "rebooting");
    assert_eq!(rebooting.provider_id, first.provider_id);
    sim.state().push_event(&id(1), event::PHONED_HOME, "");
    let back = node(&sim);
    assert!(back.ready, "phoned home after the reboot");
    assert_ne!(back.boot_id, first.boot_id, "a new boot");
    sim.state().faults.hung.insert(id(1));
    assert!(!node(&sim).ready, "hung");
    sim.state().faults.hung.clear();
    power(&sim, PowerAction::Off);
    assert!(!node(&sim).ready, "powered off");
}

fn node_with(ready: &str, boot_id: &str) -> Node {
    let heartbeat = Time(
        "2026-01-02T03:04:05Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let condition = |kind: &str, status: &str| NodeCondition {
        type_: kind.into(),
        status: status.into(),
        last_heartbeat_time: Some(heartbeat.clone()),
        ..Default::default()
    };
    Node {
        status: Some(NodeStatus {
            conditions: Some(vec![
                condition("Ready", ready),
                condition("MemoryPressure", "False"),
            ]),
            node_info: Some(NodeSystemInfo {
                boot_id: boot_id.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn wanted(ready: bool, boot_id: &str) -> WantedNode {
    WantedNode {
        provider_id: "metal://mini-lab/m".into(),
        address: None,
        control_plane: false,
        version: None,
        ready,
        boot_id: boot_id.into(),
    }
}

#[test]
fn a_node_is_written_only_when_its_readiness_or_boot_differs() {
    let ready = node_with("True", "boot-1");
    assert_eq!(status_change(Some(&ready), &wanted(true, "boot-1")), None);
    let rebooted = status_change(Some(&ready), &wanted(true, "boot-2")).expect("new boot");
    assert_eq!(rebooted["status"]["nodeInfo"]["bootID"], "boot-2");
    assert_eq!(rebooted["status"]["conditions"][0]["status"], "True");
    let unknown = node_with("Unknown", "boot-1");
    assert_eq!(
        status_change(Some(&unknown), &wanted(false, "boot-2")),
        None
    );
    let back = status_change(Some(&unknown), &wanted(true, "boot-2")).expect("ready again");
    assert_eq!(back["status"]["conditions"][0]["status"], "True");
    assert!(
        status_change(None, &wanted(false, "boot-1")).is_some(),
        "new node"
    );
}

#[test]
fn a_node_goes_not_ready_as_the_node_lifecycle_controller_marks_it() {
    let ready = node_with("True", "boot-1");
    let patch = status_change(Some(&ready), &wanted(false, "boot-1")).expect("not ready");
    let conditions = patch["status"]["conditions"]
        .as_array()
        .unwrap_or_else(|| panic!("conditions: {patch}"));
    let ready = conditions
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap_or_else(|| panic!("Ready: {patch}"));
    assert_eq!(ready["status"], "Unknown");
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    assert_eq!(ready["lastHeartbeatTime"], "2026-01-02T03:04:05Z", "kept");
    assert_ne!(ready["lastTransitionTime"], "2026-01-02T03:04:05Z", "fresh");
    assert!(conditions.iter().all(|c| c["status"] == "Unknown"));
    assert!(patch["status"].get("nodeInfo").is_none(), "node info kept");
}
