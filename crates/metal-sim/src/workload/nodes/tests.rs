use super::*;
use metal_api::types::{MachineAllocation, MachineEvent};

const TAG: &str = "cluster.metal-stack.io/id=ns.c";

fn sim() -> Sim {
    Sim::new(
        &crate::inventory::Inventory::default_lab(),
        crate::SimConfig::default(),
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
