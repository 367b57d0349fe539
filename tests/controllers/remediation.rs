//! A remediation metal-api refuses: an operator locked the machine, and metal-api answers its
//! reinstall 400. capms records the refusal with metal-api's answer in the status and an Event,
//! and asks again with its backoff, never in a loop; once the machine is unlocked, the reinstall
//! is asked for, and accepted, once.

use super::crash_points::inventory;
use super::looks::version_of;
use super::*;
use capms::api::remediation::MetalStackRemediation;

const REINSTALL: &str = "/v1/machine/{id}/reinstall";
/// How long the refusals are counted: capms's backoff (2 s, 4 s, 8 s, 16 s, 30 s) asks four
/// times in it; a loop without backoff asked 191 times.
const REFUSED_FOR: Duration = Duration::from_secs(40);
/// The most refused reinstalls capms may ask for over [`REFUSED_FOR`].
const MOST_REFUSALS: u64 = 10;

/// Calls of `route` the simulator answered with `status`.
fn answered(env: &Env, route: &str, status: u16) -> u64 {
    let report = env.sim.sim.stats().report();
    let of_route = report.requests.iter().filter(|r| r.route == route);
    of_route
        .filter(|r| r.status == status)
        .map(|r| r.count)
        .sum()
}

fn lock(env: &Env, id: &str, locked: bool) {
    let mut state = env.sim.sim.state();
    let machine = state.machines.get_mut(id).expect("the machine");
    machine.state.value = if locked { "LOCKED" } else { "" }.into();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reinstall_is_reported_and_asked_again_with_backoff_then_once_accepted() {
    let mut env = Env::with_inventory("remediation-refused", inventory(1)).await;
    env.start_capms(&[]);
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.add_lab_machine(MSC, "worker-r", "bootstrap").await;
    let workers = ["worker-r".to_owned()];
    eventually("the worker ready", support::LOADED_MACHINE_WAIT, || async {
        env.all_ready(&workers).await.then_some(())
    })
    .await;
    let id = env.machine_of("worker-r").await;
    lock(&env, &id, true);
    env.apply(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackRemediation",
        "metadata": {"name": "worker-r"}, "spec": {"strategy": {"type": "Reinstall", "timeoutSeconds": 3600}}}))
    .await;

    let remediations: Api<MetalStackRemediation> = Api::namespaced(env.client(), &env.ns.name);
    let last_action = || async {
        let msr = remediations.get_opt("worker-r").await.ok().flatten()?;
        msr.status?.last_power_action
    };
    eventually(
        "the refusal recorded",
        support::LOADED_MACHINE_WAIT,
        || async {
            last_action()
                .await
                .filter(|a| !a.accepted && a.answer.contains("locked"))
        },
    )
    .await;
    let events = env.dynamic("events.k8s.io/v1", "Event", "events");
    let reported = || async {
        let list = events.list(&Default::default()).await.ok()?;
        let refused = list.items.iter().find(|e| {
            let note = e.data["note"].as_str().unwrap_or_default();
            e.data["reason"] == "RemediationFailed" && note.contains("locked")
        });
        refused.map(|_| ())
    };
    eventually(
        "an Event of the refusal",
        support::LOADED_MACHINE_WAIT,
        reported,
    )
    .await;
    let first = answered(&env, REINSTALL, 400);
    // sleep-ok: the refusals are counted over a window of time: a rate, not an event.
    tokio::time::sleep(REFUSED_FOR).await;
    let refusals = answered(&env, REINSTALL, 400) - first;
    eprintln!("{refusals} refused reinstalls asked again in {REFUSED_FOR:?}");
    assert!(
        (1..=MOST_REFUSALS).contains(&refusals),
        "{refusals} refused reinstalls in {REFUSED_FOR:?}: asked again with backoff, not in a loop"
    );

    lock(&env, &id, false);
    eventually(
        "the reinstall accepted",
        support::LOADED_MACHINE_WAIT,
        || async {
            last_action()
                .await
                .filter(|a| a.accepted && a.action == "Reinstall")
        },
    )
    .await;
    // Accepted, it is not asked again within its attempt: capms looked twice more (its attempt
    // polls metal-api every 10 s) and asked nothing.
    let accepted = answered(&env, REINSTALL, 200);
    let msr = remediations.get("worker-r").await.expect("the remediation");
    env.looked("MetalStackRemediation", "worker-r", version_of(&msr), 2)
        .await;
    assert_eq!(
        (accepted, answered(&env, REINSTALL, 200)),
        (1, 1),
        "one accepted reinstall"
    );
}
