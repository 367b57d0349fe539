//! The crash points' remediations of a worker, as a MachineHealthCheck asks for them: a power
//! cycle (never asked twice within its attempt, whatever life dies where), the remediation
//! wound up once deleted, one handed back within its cooldown (its machine retired: the
//! deletion frees it with the cluster), and a reinstall.

use super::*;
use capms::api::remediation::{MetalStackRemediation, RemediationPhase};
use capms::controllers::remediation::REMEDIATED_ANNOTATION;
use capms::ownership::retired_machines;
use kube::ResourceExt;
use metal_api::types::event;

/// Remediations of `worker` (a Machine of the lab cluster with its machine), life after life.
pub(super) async fn remediated(env: &Env, lives: &mut Lives, worker: &str) {
    let id = env.machine_of(worker).await;
    let began = jiff::Timestamp::now();
    request(
        env,
        worker,
        json!({"type": "Reboot", "timeoutSeconds": 3600}),
    )
    .await;
    let asked = || async { asked_of(env, worker, "Cycle").await };
    lives.until(env, "a power cycle", asked).await;
    let cycles = reboots_since(env, &id, began);
    assert_eq!(
        cycles, 1,
        "one power cycle within the attempt, whichever life died where"
    );

    withdraw(env, lives, worker, "a remediation wound up").await;
    let machine = env.dynamic("cluster.x-k8s.io/v1beta2", "Machine", "machines");
    let noted = machine.get(worker).await.expect("the Machine");
    assert!(
        noted.annotations().contains_key(REMEDIATED_ANNOTATION),
        "the remediation noted"
    );

    request(
        env,
        worker,
        json!({"cooldownSeconds": 3600, "onExhaustion": "Retire"}),
    )
    .await;
    let handed_back = || async {
        let exhausted = phase_of(env, worker).await == Some(RemediationPhase::Exhausted);
        let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
        let cluster = clusters.get(MSC).await.ok();
        let retired = cluster.is_some_and(|c| retired_machines(&c).contains(&id));
        let machine = machine.get(worker).await.ok();
        let conditions = machine.map(|m| m.data["status"]["conditions"].clone());
        let given_up = conditions
            .as_ref()
            .and_then(|c| c.as_array())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "OwnerRemediated" && c["status"] == "False")
            });
        exhausted && retired && given_up
    };
    lives
        .until(env, "a remediation within its cooldown", handed_back)
        .await;
    assert_eq!(
        reboots_since(env, &id, began),
        1,
        "nothing asked within the cooldown"
    );
    withdraw(env, lives, worker, "a remediation given up, deleted").await;

    request(
        env,
        worker,
        json!({"type": "Reinstall", "timeoutSeconds": 3600}),
    )
    .await;
    let reinstalled = || async { asked_of(env, worker, "Reinstall").await };
    lives.until(env, "a reinstall", reinstalled).await;
    let api: Api<MetalStackRemediation> = Api::namespaced(env.client(), &env.ns.name);
    let status = api.get(worker).await.map(|m| m.status);
    let events = env
        .sim
        .sim
        .state()
        .machines
        .get(&id)
        .map(|m| m.events.clone());
    assert_eq!(
        reboots_since(env, &id, began),
        2,
        "one reinstall within its attempt: {status:?}; {events:?}"
    );
    withdraw(env, lives, worker, "a reinstall wound up").await;
}

/// A MetalStackRemediation of Machine `worker` with `strategy`, as the MachineHealthCheck makes
/// it: named after the Machine.
async fn request(env: &Env, worker: &str, strategy: serde_json::Value) {
    env.apply(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackRemediation",
        "metadata": {"name": worker}, "spec": {"strategy": strategy}}))
    .await;
}

/// Deleted, as the MachineHealthCheck deletes it once the Machine is healthy; waits until capms
/// let it go.
async fn withdraw(env: &Env, lives: &mut Lives, worker: &str, phase: &str) {
    let api: Api<MetalStackRemediation> = Api::namespaced(env.client(), &env.ns.name);
    api.delete(worker, &Default::default())
        .await
        .expect("delete the remediation");
    let gone = || async { matches!(api.get_opt(worker).await, Ok(None)) };
    lives.until(env, phase, gone).await;
}

async fn phase_of(env: &Env, worker: &str) -> Option<RemediationPhase> {
    let api: Api<MetalStackRemediation> = Api::namespaced(env.client(), &env.ns.name);
    let msr = api.get_opt(worker).await.ok().flatten()?;
    msr.status.and_then(|s| s.phase)
}

/// Has the remediation of `worker` had metal-api accept its `action`?
async fn asked_of(env: &Env, worker: &str, action: &str) -> bool {
    let api: Api<MetalStackRemediation> = Api::namespaced(env.client(), &env.ns.name);
    let Ok(Some(msr)) = api.get_opt(worker).await else {
        return false;
    };
    let last = msr.status.and_then(|s| s.last_power_action);
    last.is_some_and(|a| a.accepted && a.action == action)
}

/// The reboots metal-api recorded for machine `id` since `began`.
fn reboots_since(env: &Env, id: &str, began: jiff::Timestamp) -> usize {
    let state = env.sim.sim.state();
    let events = state
        .machines
        .get(id)
        .map(|m| m.events.clone())
        .unwrap_or_default();
    let reboots = events.iter().filter(|e| e.event == event::PLANNED_REBOOT);
    reboots.filter(|e| e.time >= began).count()
}
