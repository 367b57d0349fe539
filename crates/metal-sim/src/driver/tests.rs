//! The driver on fast timings: machines coming back from power actions and reinstalls, stale
//! tasks doing nothing, and hung and incurable machines.

use super::*;
use crate::inventory::Inventory;
use crate::{SimConfig, Timings};
use metal_api::types::*;
use std::time::Instant;

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
const M1: &str = "00000000-0000-0000-0000-000000000001";
const M2: &str = "00000000-0000-0000-0000-000000000002";

fn sim() -> Sim {
    let config = SimConfig {
        timings: Timings::fast(),
        ..Default::default()
    };
    Sim::new(&Inventory::default_lab(), config).unwrap_or_else(|e| panic!("sim: {e}"))
}

/// What a reboot takes at least: metal-hammer's or the kernel's boot, then phoning home.
fn reboot_time(sim: &Sim) -> Duration {
    sim.config.timings.booting + sim.config.timings.phoned_home
}

/// Polls `what` for up to ten seconds.
async fn until<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = found() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what} within 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The machine's newest event's name.
fn newest(sim: &Sim, id: &str) -> String {
    sim.state().machines[id].events[0].event.clone()
}

/// The machine's events since (not including) the newest `Planned Reboot`, oldest first.
fn since_reboot(sim: &Sim, id: &str) -> Vec<String> {
    let state = sim.state();
    let mut after: Vec<String> = state.machines[id]
        .events
        .iter()
        .take_while(|e| e.event != event::PLANNED_REBOOT)
        .map(|e| e.event.clone())
        .collect();
    after.reverse();
    after
}

async fn phoned_home(sim: &Sim, id: &str) {
    until(&format!("{id} phones home"), || {
        (newest(sim, id) == event::PHONED_HOME).then_some(())
    })
    .await;
}

/// M1 allocated through the driver and phoned home; returns its allocation uuid.
async fn booted(sim: &Sim) -> String {
    let lease = {
        let mut state = sim.state();
        let network = state
            .network_allocate(&NetworkAllocateRequest {
                projectid: PROJECT.into(),
                partitionid: "mini-lab".into(),
                ..Default::default()
            })
            .unwrap_or_else(|e| panic!("network: {e:?}"));
        let req = MachineAllocateRequest {
            uuid: Some(M1.into()),
            hostname: "worker".into(),
            projectid: PROJECT.into(),
            imageid: "debian-13".into(),
            networks: Some(vec![AllocationNetwork {
                networkid: network.id,
                autoacquire: None,
            }]),
            ..Default::default()
        };
        state
            .machine_allocate(&req, None, ROLE_MACHINE, "test")
            .unwrap_or_else(|e| panic!("allocate: {e:?}"));
        state.lease(M1).unwrap_or_else(|| panic!("lease"))
    };
    let allocation = lease.allocation.clone().unwrap_or_default();
    sim.spawn_install(M1.into(), lease);
    phoned_home(sim, M1).await;
    allocation
}

/// Carries out `action` as the route does: the reboot it causes is driven.
fn power(sim: &Sim, id: &str, action: PowerAction) {
    let (_, reboot) = sim
        .state()
        .machine_power(id, action, "")
        .unwrap_or_else(|e| panic!("{action:?}: {e:?}"));
    if let Some(lease) = reboot {
        sim.spawn_reboot(id.into(), lease);
    }
}

#[tokio::test]
async fn a_power_cycle_reboots_an_allocated_machine_back_to_phoned_home() {
    let sim = sim();
    booted(&sim).await;
    let start = Instant::now();
    power(&sim, M1, PowerAction::Cycle);
    assert_eq!(newest(&sim, M1), event::PLANNED_REBOOT);
    {
        let state = sim.state();
        assert!(!state.kubelet_running(&state.machines[M1]), "rebooting");
    }
    phoned_home(&sim, M1).await;
    assert!(
        start.elapsed() >= reboot_time(&sim),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(since_reboot(&sim, M1), [event::PHONED_HOME], "from disk");
    let state = sim.state();
    let view = state.machine(M1).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(!view.events.crash_loop);
    assert_eq!(view.events.last_error_event, None);
    assert_eq!(view.liveliness, liveliness::ALIVE);
    assert!(state.kubelet_running(&state.machines[M1]));
}

#[tokio::test]
async fn a_second_cycle_restarts_the_reboot_and_a_stale_task_does_nothing() {
    let sim = sim();
    booted(&sim).await;
    // Two leases, the first made stale by the second cycle; only the stale one is driven.
    let cycle = |sim: &Sim| {
        let (_, lease) = sim
            .state()
            .machine_power(M1, PowerAction::Cycle, "")
            .unwrap_or_else(|e| panic!("cycle: {e:?}"));
        lease.unwrap_or_else(|| panic!("a cycle reboots"))
    };
    let stale = cycle(&sim);
    let current = cycle(&sim);
    sim.spawn_reboot(M1.into(), stale);
    tokio::time::sleep(reboot_time(&sim) * 3).await;
    assert_eq!(
        newest(&sim, M1),
        event::PLANNED_REBOOT,
        "the stale task stopped"
    );
    sim.spawn_reboot(M1.into(), current);
    phoned_home(&sim, M1).await;

    // Driven both, a second cycle during the reboot restarts it: home only a full reboot later.
    power(&sim, M1, PowerAction::Cycle);
    tokio::time::sleep(sim.config.timings.booting / 2).await;
    let second = Instant::now();
    power(&sim, M1, PowerAction::Cycle);
    phoned_home(&sim, M1).await;
    assert!(
        second.elapsed() >= reboot_time(&sim),
        "{:?}",
        second.elapsed()
    );
}

#[tokio::test]
async fn an_unallocated_machine_cycles_back_into_the_wait_loop() {
    let sim = sim();
    power(&sim, M2, PowerAction::Cycle);
    assert!(!sim.state().machines[M2].waiting, "metal-hammer reboots");
    until("M2 waits again", || {
        sim.state().machines[M2].waiting.then_some(())
    })
    .await;
    let expected = BOOT_TO_WAITING.map(|(name, _)| name);
    assert_eq!(since_reboot(&sim, M2), expected);
}

#[tokio::test]
async fn a_machine_powered_off_stays_down_until_powered_on() {
    let sim = sim();
    booted(&sim).await;
    power(&sim, M1, PowerAction::Off);
    tokio::time::sleep(reboot_time(&sim) * 3).await;
    assert_eq!(since_reboot(&sim, M1), Vec::<String>::new(), "off: silent");
    power(&sim, M1, PowerAction::On);
    phoned_home(&sim, M1).await;
    assert_eq!(since_reboot(&sim, M1), [event::PHONED_HOME]);
}

#[tokio::test]
async fn a_reinstall_installs_again_on_the_same_allocation() {
    let sim = sim();
    let allocation = booted(&sim).await;
    let req = MachineReinstallRequest {
        id: M1.into(),
        imageid: "capms-ubuntu-1.34".into(),
        ..Default::default()
    };
    let (_, lease) = sim
        .state()
        .machine_reinstall(M1, &req)
        .unwrap_or_else(|e| panic!("reinstall: {e:?}"));
    sim.spawn_reboot(M1.into(), lease);
    phoned_home(&sim, M1).await;
    let mut expected: Vec<&str> = BOOT_TO_WAITING.map(|(name, _)| name).to_vec();
    expected.extend([
        event::INSTALLING,
        event::BOOTING_NEW_KERNEL,
        event::PHONED_HOME,
    ]);
    assert_eq!(since_reboot(&sim, M1), expected);
    let view = sim.state().machine(M1).unwrap_or_else(|e| panic!("{e:?}"));
    let a = view.allocation.unwrap_or_else(|| panic!("allocated"));
    assert_eq!(a.allocationuuid, allocation);
    assert!(!a.reinstall, "finalized");
    assert!(!view.events.crash_loop);
    assert_eq!(view.events.last_error_event, None);
}

#[tokio::test]
async fn a_hung_machine_is_cured_by_a_cycle_but_an_incurable_one_hangs_again() {
    let sim = sim();
    booted(&sim).await;
    sim.state().faults.hung.insert(M1.into());
    power(&sim, M1, PowerAction::Cycle);
    phoned_home(&sim, M1).await;
    assert!(sim.state().faults.hung.is_empty(), "cured");

    sim.state().faults.incurable.insert(M1.into());
    power(&sim, M1, PowerAction::Reset);
    until("M1 hangs after the reboot", || {
        sim.state().faults.hung.contains(M1).then_some(())
    })
    .await;
    tokio::time::sleep(reboot_time(&sim) * 2).await;
    assert_eq!(since_reboot(&sim, M1), Vec::<String>::new(), "never home");

    let req = MachineReinstallRequest {
        id: M1.into(),
        imageid: "debian-13".into(),
        ..Default::default()
    };
    let (_, lease) = sim
        .state()
        .machine_reinstall(M1, &req)
        .unwrap_or_else(|e| panic!("reinstall: {e:?}"));
    sim.spawn_reboot(M1.into(), lease);
    tokio::time::sleep(reboot_time(&sim) * 4).await;
    assert!(sim.state().faults.hung.contains(M1), "still hung");
    assert_ne!(newest(&sim, M1), event::PHONED_HOME);
}

#[tokio::test]
async fn a_machine_hung_during_its_installation_goes_on_once_the_fault_is_lifted() {
    let sim = sim();
    sim.state().faults.hung.insert(M1.into());
    let booting = tokio::spawn({
        let sim = sim.clone();
        async move { booted(&sim).await }
    });
    tokio::time::sleep(reboot_time(&sim) * 3).await;
    assert_eq!(newest(&sim, M1), event::WAITING, "hung: no event");
    sim.state().faults.hung.clear();
    booting.await.unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn a_machine_powered_off_during_its_reclaim_stays_out_of_the_wait_loop() {
    let sim = sim();
    booted(&sim).await;
    sim.state()
        .machine_free(M1)
        .unwrap_or_else(|e| panic!("free: {e:?}"));
    sim.spawn_reclaim(M1.into());
    until("the reclaim starts", || {
        (newest(&sim, M1) == event::MACHINE_RECLAIM).then_some(())
    })
    .await;
    power(&sim, M1, PowerAction::Off);
    let t = &sim.config.timings;
    tokio::time::sleep((t.ip_release + t.reclaim) * 2).await;
    let state = sim.state();
    assert!(!state.machines[M1].waiting, "off: not a candidate");
    assert_eq!(state.machines[M1].events[0].event, event::PLANNED_REBOOT);
    let tag = format!("{}={M1}", metal_api::tags::MACHINE_ID);
    assert!(
        state.ips.values().all(|ip| !ip.tags.contains(&tag)),
        "its IPs are released all the same"
    );
}
