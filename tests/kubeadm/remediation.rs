//! Remediation on the same machine, with Cluster API's real MachineHealthCheck: a hung worker
//! is power-cycled once and comes back as itself; a reinstall brings one back as itself; one
//! that hangs again within the cooldown is handed back at once and replaced; one that no
//! power cycle cures is given up after its attempts and replaced, its machine retired (kept
//! allocated until the cluster goes); without a remediation template, a hung worker is replaced
//! as before.

use super::*;
use capms::api::MetalStackCluster;
use capms::api::remediation::{ExhaustionPolicy, MetalStackRemediation};
use capms::ownership::retired_machines;
use std::collections::BTreeSet;

/// The shipped template's MetalStackRemediationTemplate and MachineHealthCheck of the workers.
const TEMPLATE: &str = "kc-worker";
const POWER_CYCLE: &str = "/v1/machine/{id}/power/cycle";
const REINSTALL: &str = "/v1/machine/{id}/reinstall";

/// The shipped MetalStackRemediationTemplate with `strategy`, and the shipped MachineHealthCheck
/// of the workers taking a node NotReady for 5 s (not 300) as unhealthy; without a strategy, the
/// check alone, without `remediation`, as before capms remediated.
fn health_check(stack: &Stack, strategy: Option<serde_json::Value>) {
    let ns = &stack.ns.name;
    let mut check = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
        "metadata": {"name": TEMPLATE, "namespace": ns},
        "spec": {"clusterName": CLUSTER,
            "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": format!("{CLUSTER}-worker")}},
            "checks": {"nodeStartupTimeoutSeconds": 600, "unhealthyNodeConditions": [
                {"type": "Ready", "status": "Unknown", "timeoutSeconds": 5},
                {"type": "Ready", "status": "False", "timeoutSeconds": 5}]}}});
    let mut objects = vec![];
    if let Some(strategy) = strategy {
        objects.push(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackRemediationTemplate",
            "metadata": {"name": TEMPLATE, "namespace": ns},
            "spec": {"template": {"spec": {"strategy": strategy}}}}));
        check["spec"]["remediation"] = json!({"templateRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4",
            "kind": "MetalStackRemediationTemplate", "name": TEMPLATE}});
    }
    objects.push(check);
    let file = stack.work.path().join("remediation.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(&file, list.to_string()).expect("write");
    ControlPlane::shared().kubectl(
        &["apply", "--server-side", "--force-conflicts", "-f"],
        &[file],
    );
}

/// Worker Machines: name → the metal-stack machine behind it.
async fn workers(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    behind(client, ns, false).await
}

/// Control-plane Machines: name → the metal-stack machine behind it.
async fn control_plane_machines(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    behind(client, ns, true).await
}

/// The control plane's (or the workers') Machines: name → the metal-stack machine behind it.
async fn behind(client: &kube::Client, ns: &str, control_plane: bool) -> BTreeMap<String, String> {
    let list = capi(client, ns, "Machine").list(&Default::default()).await;
    list.map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane") == control_plane)
        .filter_map(|m| {
            let id = m.data["spec"]["providerID"].as_str()?;
            let id = metal_api::ProviderId::parse(id).ok()?.machine_id;
            Some((m.name_any(), id))
        })
        .collect()
}

/// Successful calls of `route` the simulator answered so far.
fn calls(stack: &Stack, route: &str) -> u64 {
    let report = stack.sim.sim.stats().report();
    let of_route = report.requests.iter().filter(|r| r.route == route);
    of_route.filter(|r| r.status == 200).map(|r| r.count).sum()
}

fn hang(stack: &Stack, id: &str, incurable: bool) {
    let mut state = stack.sim.sim.state();
    state.faults.hung.insert(id.to_owned());
    if incurable {
        state.faults.incurable.insert(id.to_owned());
    }
}

/// The phase of Machine `name`'s remediation; Err while there is none yet.
async fn remediation_phase(stack: &Stack, name: &str) -> Result<Option<String>, String> {
    let api = Api::<MetalStackRemediation>::namespaced(stack.ns.client.clone(), &stack.ns.name);
    let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
    let msr = found.ok_or_else(|| format!("no MetalStackRemediation {name} yet"))?;
    let status = msr.status.unwrap_or_default();
    Ok(status.phase.map(|p| format!("{p:?}")))
}

/// Waits until the MachineHealthCheck asked for Machine `name`'s remediation.
async fn requested(stack: &Stack, name: &str) {
    let what = format!("a MetalStackRemediation for {name}");
    eventually_seen(&what, LOADED_MACHINE_WAIT, || {
        remediation_phase(stack, name)
    })
    .await;
}

/// Ok once Machine `name`'s remediation is gone (the MachineHealthCheck saw it healthy) and
/// `count` Machines are Ready.
async fn remediated(stack: &Stack, name: &str, count: usize) -> Result<(), String> {
    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    let api = Api::<MetalStackRemediation>::namespaced(client.clone(), ns);
    let left = api.get_opt(name).await.map_err(|e| e.to_string())?;
    let ready = machines(client, ns)
        .await
        .iter()
        .filter(|m| m.ready)
        .count();
    match left {
        None if ready == count => Ok(()),
        left => Err(format!(
            "remediation {:?}, {ready} Machines ready",
            left.map(|r| r.status)
        )),
    }
}

/// Waits until Machine `name` was remediated on its own machine and the MachineHealthCheck,
/// seeing it healthy, deleted the remediation; `route` was called exactly once for it.
async fn back_as_itself(stack: &Stack, name: &str, id: &str, route: &str) {
    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    let before = calls(stack, route);
    let allocated_before: BTreeSet<_> = allocated(&stack.sim, ns).into_iter().collect();
    requested(stack, name).await;
    let what = format!("{name} healthy again and its remediation deleted");
    eventually_seen(&what, 2 * LOADED_MACHINE_WAIT, || {
        remediated(stack, name, 3)
    })
    .await;
    assert_eq!(calls(stack, route) - before, 1, "{route} once for {name}");
    assert_eq!(
        workers(client, ns).await.get(name),
        Some(&id.to_owned()),
        "the same machine"
    );
    let allocated_after: BTreeSet<_> = allocated(&stack.sim, ns).into_iter().collect();
    assert_eq!(allocated_after, allocated_before, "no allocation, no free");
    let machine = capi(client, ns, "Machine")
        .get(name)
        .await
        .expect("Machine");
    let noted = machine
        .annotations()
        .get(capms::controllers::remediation::REMEDIATED_ANNOTATION);
    assert!(noted.is_some(), "the remediation noted on {name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_comes_back_on_its_machine_and_one_that_does_not_is_replaced() {
    let _one = ONE_AT_A_TIME.lock().await;
    let stack = Stack::start("remediation", Inventory::default_lab()).await;
    stack.apply_cluster(None, "1", "2").await;
    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    wait_running(
        client,
        ns,
        3,
        "one control-plane machine and two workers Running",
    )
    .await;
    wait_ready(client, ns, "every Machine Ready").await;
    health_check(
        &stack,
        Some(
            json!({"type": "Reboot", "retryLimit": 1, "timeoutSeconds": 100, "cooldownSeconds": 3600}),
        ),
    );
    let workers_at_start = workers(client, ns).await;
    let mut named = workers_at_start.iter();
    let ((a, a_id), (b, b_id)) = (named.next().expect("a"), named.next().expect("b"));

    // A hung worker is power-cycled once and comes back on the same machine.
    hang(&stack, a_id, false);
    back_as_itself(&stack, a, a_id, POWER_CYCLE).await;

    // Reinstalled, a worker comes back as itself too.
    health_check(
        &stack,
        Some(json!({"type": "Reinstall", "retryLimit": 1, "timeoutSeconds": 100})),
    );
    hang(&stack, b_id, false);
    back_as_itself(&stack, b, b_id, REINSTALL).await;

    // Hanging again within the cooldown, a worker is handed back at once and replaced.
    health_check(
        &stack,
        Some(
            json!({"type": "Reboot", "retryLimit": 1, "timeoutSeconds": 100, "cooldownSeconds": 3600}),
        ),
    );
    let cycles = calls(&stack, POWER_CYCLE);
    hang(&stack, a_id, true);
    let replacement = replaced(&stack, a, a_id, ExhaustionPolicy::Reuse).await;
    assert_eq!(
        calls(&stack, POWER_CYCLE),
        cycles,
        "no power cycle within the cooldown"
    );

    // A worker no power cycle cures is given up after its one attempt and replaced; retired,
    // its machine stays allocated, out of the pool, until the cluster goes.
    health_check(
        &stack,
        Some(
            json!({"type": "Reboot", "retryLimit": 1, "timeoutSeconds": 100, "onExhaustion": "Retire"}),
        ),
    );
    let id = workers(client, ns)
        .await
        .get(&replacement)
        .cloned()
        .expect("the replacement's machine");
    hang(&stack, &id, true);
    replaced(&stack, &replacement, &id, ExhaustionPolicy::Retire).await;
    assert_eq!(calls(&stack, POWER_CYCLE), cycles + 1, "one attempt");

    // Without a remediation template the MachineHealthCheck works as before: the Machine is
    // deleted and replaced, its machine freed, nothing power-cycled.
    health_check(&stack, None);
    let (name, id) = workers(client, ns)
        .await
        .into_iter()
        .next()
        .expect("a worker");
    hang(&stack, &id, false);
    replaced(&stack, &name, &id, ExhaustionPolicy::Reuse).await;
    assert_eq!(calls(&stack, POWER_CYCLE), cycles + 1, "no power cycle");
    stack.delete_cluster().await;
}

/// Waits until the given-up Machine `name` is gone (a Machine being deleted is still listed,
/// and its machine may be freed before Cluster API lets it go), then until its machine `id` is
/// freed; or, retired, checks that it is not.
async fn given_up(stack: &Stack, name: &str, id: &str, exhaustion: ExhaustionPolicy) {
    let ns = stack.ns.name.as_str();
    let machines = capi(&stack.ns.client, ns, "Machine");
    let gone = || async { machines.get_opt(name).await.ok()?.is_none().then_some(()) };
    eventually("the given-up Machine gone", LOADED_MACHINE_WAIT, gone).await;
    let held = || allocated(&stack.sim, ns).iter().any(|(m, _, _)| m == id);
    if exhaustion == ExhaustionPolicy::Reuse {
        let what = "the given-up machine freed";
        eventually(what, LOADED_MACHINE_WAIT, || async {
            (!held()).then_some(())
        })
        .await;
        let mut state = stack.sim.sim.state();
        state.faults.hung.remove(id);
        state.faults.incurable.remove(id);
        return;
    }
    assert!(held(), "the retired machine {id} stays allocated");
    let clusters = Api::<MetalStackCluster>::namespaced(stack.ns.client.clone(), ns);
    let recorded = clusters.list(&Default::default()).await.expect("clusters");
    let recorded = recorded
        .items
        .iter()
        .any(|c| retired_machines(c).contains(id));
    assert!(
        recorded,
        "machine {id} recorded retired on its MetalStackCluster"
    );
}

/// Waits until Machine `name` was given up (its remediation Exhausted), replaced by a new
/// Machine Running on another machine, and its machine `id` freed or retired; the
/// replacement's name.
async fn replaced(stack: &Stack, name: &str, id: &str, exhaustion: ExhaustionPolicy) -> String {
    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    let before = workers(client, ns).await;
    let what = format!("{name}'s remediation exhausted");
    eventually_seen(&what, 2 * LOADED_MACHINE_WAIT, || async {
        match remediation_phase(stack, name).await {
            Ok(Some(phase)) if phase == "Exhausted" => Ok(()),
            // Given up, the Machine (and with it its remediation) may be gone already.
            Err(_) if !workers(client, ns).await.contains_key(name) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    given_up(stack, name, id, exhaustion).await;
    wait_running(client, ns, 3, "the replacement Running").await;
    let now = workers(client, ns).await;
    assert!(!now.contains_key(name), "{name} replaced: {now:?}");
    let fresh = now.keys().find(|m| !before.contains_key(*m));
    fresh.cloned().expect("a replacement")
}

/// One of three control-plane machines hangs: a MachineHealthCheck of the control plane has it
/// power-cycled on its own machine while the other two keep the control plane available, and
/// no control-plane Machine is replaced. The check is removed again.
pub(super) async fn a_control_plane_machine_comes_back_on_its_machine(stack: &Stack) {
    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    let check = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
        "metadata": {"name": "kc-control-plane", "namespace": ns},
        "spec": {"clusterName": CLUSTER,
            "selector": {"matchLabels": {"cluster.x-k8s.io/control-plane": ""}},
            "checks": {"unhealthyNodeConditions": [
                {"type": "Ready", "status": "Unknown", "timeoutSeconds": 5},
                {"type": "Ready", "status": "False", "timeoutSeconds": 5}]},
            "remediation": {"templateRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4",
                "kind": "MetalStackRemediationTemplate", "name": TEMPLATE}}}});
    let file = stack.work.path().join("control-plane-check.json");
    std::fs::write(&file, check.to_string()).expect("write");
    let cp = ControlPlane::shared();
    cp.kubectl(
        &["apply", "--server-side", "-f"],
        std::slice::from_ref(&file),
    );
    let control_planes = control_plane_machines(client, ns).await;
    let (name, id) = control_planes
        .iter()
        .next()
        .expect("a control-plane machine");
    let cycles = calls(stack, POWER_CYCLE);
    hang(stack, id, false);
    requested(stack, name).await;
    let kcp = api_kcp(client, ns);
    let what = format!("{name} healthy again, the control plane available throughout");
    eventually_seen(&what, 2 * LOADED_MACHINE_WAIT, || async {
        let available = kcp
            .get(&format!("{CLUSTER}-control-plane"))
            .await
            .map_err(|e| e.to_string())?;
        let conditions = available.data["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let up = conditions
            .iter()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        assert!(
            up,
            "the control plane unavailable while {name} is remediated: {conditions:?}"
        );
        remediated(stack, name, 4).await
    })
    .await;
    assert_eq!(calls(stack, POWER_CYCLE) - cycles, 1, "one power cycle");
    assert_eq!(
        control_plane_machines(client, ns).await,
        control_planes,
        "none replaced"
    );
    cp.kubectl(&["delete", "-f"], &[file]);
}

fn api_kcp(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    api(
        client,
        ns,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
    )
}
