//! A machine's power and reinstall through capms's client: a cycle's Planned Reboot and the way
//! back to Phoned Home, a reinstall on the same allocation and its refusals, and a hung machine
//! (switched on through `/sim/faults`) cured by a cycle.

use super::*;
use serde_json::{Value, json};

/// A worker allocated in a new private network that phoned home.
async fn booted_worker(client: &Client) -> Machine {
    let network = private_network(client).await;
    let machine = client
        .machine_allocate(&machine_request(&network.id, "debian-13"))
        .await
        .expect("allocated");
    wait_for_event(client, &machine.id, event::PHONED_HOME).await
}

/// `PUT /sim/faults` with `faults`; the status and the answer.
async fn set_faults(sim: &RunningSim, faults: Value) -> (u16, String) {
    let response = reqwest::Client::new()
        .put(format!("{}/sim/faults", sim.url))
        .json(&faults)
        .send()
        .await
        .expect("faults endpoint");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

fn allocation_uuid(m: &Machine) -> String {
    m.allocation
        .as_ref()
        .map(|a| a.allocationuuid.clone())
        .expect("allocated")
}

#[tokio::test]
async fn a_power_cycle_reboots_the_machine_and_it_phones_home_again() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let client = sim.editor();
    let machine = booted_worker(&client).await;
    let cycled = client
        .machine_power(&machine.id, PowerAction::Cycle)
        .await
        .expect("cycled");
    assert_eq!(cycled.last_event(), Some(event::PLANNED_REBOOT));
    assert_eq!(cycled.events.log[0].message, "CYCLE");
    let back = wait_for_event(&client, &machine.id, event::PHONED_HOME).await;
    assert_eq!(allocation_uuid(&back), allocation_uuid(&machine));
    assert!(!back.events.crash_loop);
    assert_eq!(back.events.last_error_event, None);
    assert_eq!(back.liveliness, liveliness::ALIVE);

    let viewer = sim.client(AuthType::View);
    let (code, _) = status(viewer.machine_power(&machine.id, PowerAction::Cycle).await);
    assert_eq!(code, 403, "viewers cannot power machines");
    let (code, message) = status(client.machine_power("nope", PowerAction::Off).await);
    assert_eq!(
        (code, message.as_str()),
        (404, "NotFound no machine with id \"nope\" found")
    );
    let lit = client
        .machine_power(&machine.id, PowerAction::ChassisIdentifyLedOn)
        .await
        .expect("led on");
    assert_eq!(lit.ledstate.value, "LED-ON");
}

#[tokio::test]
async fn a_reinstall_keeps_the_allocation_and_is_refused_for_a_free_machine() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let client = sim.editor();
    let machine = booted_worker(&client).await;
    let reinstalled = client
        .machine_reinstall(&machine.id, "capms-ubuntu-1.34")
        .await
        .expect("reinstalled");
    let (before, after) = (
        machine.allocation.clone().expect("allocated"),
        reinstalled.allocation.clone().expect("still allocated"),
    );
    assert_eq!(after.allocationuuid, before.allocationuuid);
    assert_eq!(after.hostname, before.hostname);
    assert_eq!(after.user_data, before.user_data);
    assert_eq!(after.networks, before.networks);
    assert!(after.reinstall);
    assert_eq!(
        after.image.map(|i| i.id).as_deref(),
        Some("capms-ubuntu-1.34.1")
    );
    let back = wait_for_event(&client, &machine.id, event::PHONED_HOME).await;
    assert_eq!(allocation_uuid(&back), before.allocationuuid);
    let since: Vec<&str> = back
        .events
        .log
        .iter()
        .take_while(|e| e.event != event::PLANNED_REBOOT)
        .map(|e| e.event.as_str())
        .collect();
    assert!(
        since.starts_with(&[
            event::PHONED_HOME,
            event::BOOTING_NEW_KERNEL,
            event::INSTALLING
        ]),
        "installed again: {since:?}"
    );

    let (code, message) = status(client.machine_reinstall(&machine.id, "gentoo-1").await);
    assert_eq!(code, 400);
    assert!(message.contains("gentoo-1"), "{message}");
    client.machine_free(&machine.id).await.expect("freed");
    let (code, message) = status(client.machine_reinstall(&machine.id, "debian-13").await);
    assert_eq!(code, 400);
    assert!(message.contains("is not allocated"), "{message}");
}

#[tokio::test]
async fn a_hung_machine_shows_unknown_until_a_cycle_cures_it() {
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let client = sim.editor();
    let machine = booted_worker(&client).await;
    let (code, body) = set_faults(&sim, json!({"hung": ["no-such-machine"]})).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("hung: the simulator has no machine"),
        "{body}"
    );
    let (code, body) = set_faults(&sim, json!({"hung": [machine.id]})).await;
    assert_eq!(code, 200, "{body}");
    let hung = client.machine(&machine.id).await.expect("machine");
    assert_eq!(hung.liveliness, liveliness::UNKNOWN);
    client
        .machine_power(&machine.id, PowerAction::Cycle)
        .await
        .expect("cycled");
    let back = wait_for_event(&client, &machine.id, event::PHONED_HOME).await;
    assert_eq!(back.liveliness, liveliness::ALIVE);
    assert!(sim.sim.state().faults.hung.is_empty(), "cured");
}
