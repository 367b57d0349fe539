//! The BMC's side without timers: what each power action and a reinstall change at once, the
//! IPMI view, and the FSM's bookkeeping of a planned reboot.

use super::*;

const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
const M1: &str = "00000000-0000-0000-0000-000000000001";
const M2: &str = "00000000-0000-0000-0000-000000000002";

fn lab() -> State {
    State::from_inventory(&Inventory::default_lab()).expect("inventory")
}

/// Allocates M1 as `worker` in a new private network; returns the allocation as stored.
fn allocate(state: &mut State) -> MachineAllocation {
    let network = state
        .network_allocate(&NetworkAllocateRequest {
            projectid: PROJECT.into(),
            partitionid: "mini-lab".into(),
            ..Default::default()
        })
        .expect("network");
    let req = MachineAllocateRequest {
        uuid: Some(M1.into()),
        hostname: "worker".into(),
        projectid: PROJECT.into(),
        imageid: "debian-13".into(),
        networks: Some(vec![AllocationNetwork {
            networkid: network.id,
            autoacquire: None,
        }]),
        user_data: "#cloud-config\n".into(),
        ..Default::default()
    };
    let machine = state
        .machine_allocate(&req, None, ROLE_MACHINE, "test")
        .expect("allocated");
    machine.allocation.expect("allocation")
}

/// M1 allocated and phoned home in its allocation.
fn booted(state: &mut State) -> MachineAllocation {
    let allocation = allocate(state);
    for (event, message) in [
        (event::INSTALLING, "start installation"),
        (event::BOOTING_NEW_KERNEL, "booting into distro kernel"),
        (event::PHONED_HOME, "phoned home"),
    ] {
        state.push_event(M1, event, message);
    }
    allocation
}

fn events(state: &State, id: &str) -> Vec<String> {
    state.machines[id]
        .events
        .iter()
        .map(|e| format!("{}: {}", e.event, e.message))
        .collect()
}

#[test]
fn reset_cycle_and_off_write_planned_reboot_with_the_command_and_bump_the_generation() {
    let mut state = lab();
    booted(&mut state);
    let before = state.lease(M1).expect("lease");
    for (action, command) in [
        (PowerAction::Cycle, "CYCLE"),
        (PowerAction::Reset, "RESET"),
        (PowerAction::Off, "OFF"),
    ] {
        let generation = state.machines[M1].power.generation;
        let (view, lease) = state.machine_power(M1, action, "").expect("power");
        assert_eq!(
            view.events.log[0].event,
            event::PLANNED_REBOOT,
            "{action:?}: the answer shows it"
        );
        assert_eq!(view.events.log[0].message, command);
        assert_eq!(state.machines[M1].power.generation, generation + 1);
        assert_eq!(lease.is_some(), action != PowerAction::Off, "{action:?}");
        assert!(!state.holds(M1, &before), "every earlier task is stale");
    }
}

#[test]
fn a_planned_reboot_then_phoned_home_is_expected_and_clears_a_crash_loop() {
    let mut state = lab();
    booted(&mut state);
    state.machines.get_mut(M1).expect("m1").crash_loop = true;
    state.push_event(M1, event::PLANNED_REBOOT, "CYCLE");
    assert!(!state.machines[M1].crash_loop, "a planned reboot resets it");
    state.push_event(M1, event::PHONED_HOME, "phoned home");
    state.push_event(M1, event::PLANNED_REBOOT, "REINSTALL");
    for (event, message) in BOOT_TO_WAITING {
        state.push_event(M1, event, message);
    }
    let m = &state.machines[M1];
    assert!(!m.crash_loop, "{:?}", events(&state, M1));
    assert_eq!(m.last_error_event, None, "{:?}", events(&state, M1));
    assert!(
        events(&state, M1)
            .iter()
            .all(|e| !e.contains("unexpectedly")),
        "{:?}",
        events(&state, M1)
    );
}

#[test]
fn power_on_boots_only_a_machine_that_is_off() {
    let mut state = lab();
    booted(&mut state);
    let (_, lease) = state.machine_power(M1, PowerAction::On, "").expect("on");
    assert_eq!(lease, None, "already on: nothing happens");
    state.machine_power(M1, PowerAction::Off, "").expect("off");
    let m = &state.machines[M1];
    assert!(!m.power.on);
    assert_eq!(state.liveliness(m), liveliness::UNKNOWN, "no heartbeats");
    assert!(!state.kubelet_running(m));
    assert_eq!(state.machine_ipmi(M1).expect("ipmi").ipmi.powerstate, "OFF");
    let (view, lease) = state.machine_power(M1, PowerAction::On, "").expect("on");
    assert!(lease.is_some(), "it boots");
    assert_eq!(view.liveliness, liveliness::ALIVE);
    assert_eq!(state.machine_ipmi(M1).expect("ipmi").ipmi.powerstate, "ON");
    assert_eq!(
        state.boot_kind(M1),
        Some(Boot::Disk),
        "from disk: it phoned home in this allocation"
    );
}

#[test]
fn boot_devices_and_the_led_are_recorded_without_a_reboot() {
    let mut state = lab();
    booted(&mut state);
    let generation = state.machines[M1].power.generation;
    let log = events(&state, M1);
    for action in [PowerAction::Bios, PowerAction::Disk, PowerAction::Pxe] {
        let (_, lease) = state.machine_power(M1, action, "").expect("boot device");
        assert_eq!(lease, None);
        assert_eq!(state.machines[M1].power.next_boot, Some(action));
    }
    let (view, _) = state
        .machine_power(M1, PowerAction::ChassisIdentifyLedOn, "find me")
        .expect("led");
    assert_eq!(view.ledstate.value, "LED-ON");
    assert_eq!(view.ledstate.description, "find me");
    let (view, _) = state
        .machine_power(M1, PowerAction::ChassisIdentifyLedOff, "")
        .expect("led");
    assert_eq!(view.ledstate.value, "LED-OFF");
    assert_eq!(state.machines[M1].power.generation, generation);
    assert_eq!(events(&state, M1), log, "no event");
}

#[test]
fn an_unknown_machine_is_not_found() {
    let mut state = lab();
    let error = state
        .machine_power("nope", PowerAction::Cycle, "")
        .expect_err("unknown");
    assert_eq!(error, SimError::not_found("machine", "nope"));
    let req = MachineReinstallRequest {
        id: "nope".into(),
        imageid: "debian-13".into(),
        ..Default::default()
    };
    let error = state.machine_reinstall("nope", &req).expect_err("unknown");
    assert_eq!(error.status, 404);
    assert_eq!(state.machine_ipmi("nope").expect_err("unknown").status, 404);
}

#[test]
fn a_reinstall_keeps_the_allocation_and_installs_the_resolved_image() {
    let mut state = lab();
    let before = booted(&mut state);
    let req = MachineReinstallRequest {
        id: M1.into(),
        imageid: "capms-ubuntu-1.34".into(),
        ..Default::default()
    };
    let (view, lease) = state.machine_reinstall(M1, &req).expect("reinstall");
    let after = view.allocation.expect("still allocated");
    assert_eq!(after.allocationuuid, before.allocationuuid);
    assert_eq!(after.hostname, before.hostname);
    assert_eq!(after.networks, before.networks);
    assert_eq!(after.user_data, before.user_data);
    assert_eq!(
        after.image.map(|i| i.id).as_deref(),
        Some("capms-ubuntu-1.34.1")
    );
    assert!(after.reinstall);
    assert_eq!(view.events.log[0].event, event::PLANNED_REBOOT);
    assert!(state.holds(M1, &lease));
    assert_eq!(state.boot_kind(M1), Some(Boot::Install));
    state.push_event(M1, event::BOOTING_NEW_KERNEL, "booting into distro kernel");
    let allocation = state.machines[M1].allocation.as_ref().expect("allocated");
    assert!(!allocation.reinstall, "finalized before the new kernel");
}

#[test]
fn a_reinstall_is_refused_naming_why() {
    let mut state = lab();
    booted(&mut state);
    let reinstall = |state: &mut State, id: &str, image: &str| {
        let req = MachineReinstallRequest {
            id: id.into(),
            imageid: image.into(),
            ..Default::default()
        };
        state.machine_reinstall(id, &req).expect_err("refused")
    };
    let cases = [
        (
            M2,
            "debian-13",
            "machine 00000000-0000-0000-0000-000000000002 is not allocated",
        ),
        (M1, "gentoo-1", "gentoo-1"),
        (M1, "firewall-ubuntu-3.0", "not usable for a machine"),
        (M1, "", "no image"),
    ];
    for (id, image, names) in cases {
        let error = reinstall(&mut state, id, image);
        assert_eq!(error.status, 400, "{image:?}: {error:?}");
        assert!(
            error.message.starts_with(NOT_REINSTALLABLE) && error.message.contains(names),
            "{image:?}: {}",
            error.message
        );
    }
    let allocation = state.machines[M1].allocation.as_ref().expect("allocated");
    assert!(!allocation.reinstall, "a refused reinstall changes nothing");
    assert_eq!(state.machines[M1].events[0].event, event::PHONED_HOME);
}

#[test]
fn a_hung_machine_is_silent_until_a_reboot_cures_it_unless_incurable() {
    let mut state = lab();
    booted(&mut state);
    state.faults.hung.insert(M1.into());
    let m = &state.machines[M1];
    assert_eq!(state.liveliness(m), liveliness::UNKNOWN);
    assert!(!state.kubelet_running(m));
    let issues = state
        .evaluate_issues(&MachineIssuesRequest::default())
        .expect("issues");
    assert!(
        issues
            .iter()
            .any(|i| i.machineid == M1 && i.issues.contains(&"liveliness-unknown".to_owned())),
        "{issues:?}"
    );
    state
        .machine_power(M1, PowerAction::Cycle, "")
        .expect("cycle");
    assert!(state.faults.hung.is_empty(), "a cycle cures it");
    state.faults.hung.insert(M1.into());
    state.faults.incurable.insert(M1.into());
    state
        .machine_power(M1, PowerAction::Reset, "")
        .expect("reset");
    assert!(state.faults.hung.contains(M1), "incurable: it stays hung");
    state.faults.hung.insert(M2.into());
    let m2 = &state.machines[M2];
    assert_eq!(state.liveliness(m2), liveliness::DEAD, "unallocated");
}

#[test]
fn the_ipmi_view_has_a_loopback_bmc_per_machine_and_no_password() {
    let mut state = lab();
    state.machine_power(M2, PowerAction::Off, "").expect("off");
    let all = state.ipmi_find(&MachineFindRequest::default());
    assert_eq!(all.len(), state.machines.len());
    let mut addresses = BTreeSet::new();
    for answer in &all {
        let ipmi = &answer.ipmi;
        let address: std::net::SocketAddr = ipmi.address.parse().expect("host:port");
        assert!(address.ip().is_loopback(), "{address}");
        assert_eq!(address.port(), 623);
        assert!(addresses.insert(address), "{address} twice");
        assert_eq!(ipmi.password, "");
        let expected = if answer.machine.id == M2 { "OFF" } else { "ON" };
        assert_eq!(ipmi.powerstate, expected, "{}", answer.machine.id);
    }
    let find = MachineFindRequest {
        id: Some(M2.into()),
        ..Default::default()
    };
    let found: Vec<String> = state
        .ipmi_find(&find)
        .into_iter()
        .map(|m| m.machine.id)
        .collect();
    assert_eq!(found, [M2], "filtered as a machine find");
}
