//! Credentials per cluster. A cluster whose MetalStackCluster names a Secret of metal-api
//! credentials has its network, IP, firewall and machines made with them, in that metal-api
//! only, beside a cluster on capms's own credentials. A missing Secret, a URL where nothing
//! answers, or a key metal-api refuses, is a condition naming the Secret, with nothing
//! allocated anywhere; the Secret put right is taken up without a restart, and so is a key
//! rotated in metal-api and in the Secret while a machine provisions. A machine of the cluster
//! naming by providerID a machine of the other metal-api finds nothing, and changes nothing
//! there; a leak in the other metal-api is found and freed by the orphan sweep.

use super::*;
use metal_api::hmac::AuthType;

const OTHER: &str = "cluster-b";
const SECRET: &str = "metal-b";

fn credentials(url: &str, hmac: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET},
        "stringData": {"url": url, "hmac": hmac, "hmacAuthType": "Metal-Edit"}})
}

/// The lab inventory of another metal-api: its machines have ids of their own.
fn other_inventory() -> Inventory {
    let mut lab = Inventory::default_lab();
    for (n, machine) in lab.machines.iter_mut().enumerate() {
        machine.id = format!("00000000-0000-0000-00b0-{n:012}");
    }
    lab
}

/// Machines free in `sim` now stop before they phone home (`hold`), or none do.
fn hold_phone_home(sim: &RunningSim, hold: bool) {
    let mut state = sim.sim.state();
    let free = state
        .machines
        .values()
        .filter(|m| hold && m.allocation.is_none());
    let free: Vec<String> = free.map(|m| m.id.clone()).collect();
    state.faults.never_phone_home = free.into_iter().collect();
}

/// Waits until cluster B's Ready condition is False with `reason` and a message holding
/// `naming`.
async fn not_ready(clusters: &Api<MetalStackCluster>, reason: &str, naming: &str, what: &str) {
    wait_condition(clusters, OTHER, what, |msc| {
        let ready = msc
            .status
            .as_ref()
            .and_then(|s| condition(&s.conditions, "Ready"));
        ready.is_some_and(|r| {
            r.status == "False" && r.reason == reason && r.message.contains(naming)
        })
    })
    .await;
}

/// Everything allocated in `sim`: private networks, IPs, machines (by id).
fn allocated(sim: &RunningSim) -> (usize, usize, Vec<String>) {
    let (networks, ips, machines) = metal_state_of(sim);
    let allocated = machines.into_iter().filter(|m| m.allocation.is_some());
    (networks.len(), ips.len(), allocated.map(|m| m.id).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cluster_provisions_with_its_own_credentials_in_its_own_metal_api() {
    let mut env = Env::with_inventory("credentials", Inventory::default_lab()).await;
    env.start_capms(&["--orphan-sweep-interval=1s", "--orphan-grace=3s"]);
    let other = RunningSim::start(other_inventory(), "/metal").await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let (own_before, other_before) = (allocated(&env.sim), allocated(&other));
    let origin = format!("Secret {}/{SECRET}", env.ns.name);

    let mut b = lab_cluster();
    b["metadata"]["name"] = json!(OTHER);
    b["spec"]["credentialsRef"] = json!({"name": SECRET});
    env.apply_seed_cluster(OTHER, b).await;
    let missing =
        format!("the credentials Secret {origin} named in spec.credentialsRef does not exist");
    not_ready(
        &clusters,
        "CredentialsInvalid",
        &missing,
        "a condition naming the missing Secret",
    )
    .await;

    // A URL where nothing answers.
    let closed = format!("http://127.0.0.1:{}/metal", support::free_port());
    env.apply(credentials(&closed, "metal-edit")).await;
    let unreachable = format!("(as {origin} gives it) could not be reached");
    not_ready(
        &clusters,
        "MetalUnreachable",
        &unreachable,
        "a condition naming the Secret of the unanswering URL",
    )
    .await;

    env.apply(credentials(&other.url, "not-the-key")).await;
    let refused = format!("Wrong HMAC found (the credentials of {origin})");
    not_ready(
        &clusters,
        "MetalUnauthorized",
        &refused,
        "a condition naming the refused Secret",
    )
    .await;
    assert_eq!(
        allocated(&env.sim),
        own_before,
        "allocated in capms's own metal-api"
    );
    assert_eq!(
        allocated(&other),
        other_before,
        "allocated with refused credentials"
    );
    assert!(
        !env.capms_log().contains("not-the-key"),
        "a key in capms's log"
    );

    // Put right: taken up without a restart.
    env.apply(credentials(&other.url, "metal-edit")).await;
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.add_lab_machine(MSC, "worker-a", "bootstrap").await;
    env.add_lab_machine(OTHER, "worker-b", "bootstrap").await;
    for name in [MSC, OTHER] {
        wait_ready(&env, &clusters, name, |c| {
            c.status.as_ref().is_some_and(|s| s.ready)
        })
        .await;
    }
    for name in ["worker-a", "worker-b"] {
        wait_ready(&env, &machines, name, |m| {
            m.status.as_ref().is_some_and(|s| s.ready)
        })
        .await;
    }
    let (a, b) = (
        env.machine_of("worker-a").await,
        env.machine_of("worker-b").await,
    );
    let (own, theirs) = (allocated(&env.sim), allocated(&other));
    assert!(
        own.2.contains(&a) && !own.2.contains(&b),
        "capms's own metal-api: {own:?}"
    );
    assert!(
        theirs.2.contains(&b) && !theirs.2.contains(&a),
        "the Secret's metal-api: {theirs:?}"
    );
    // Each cluster's network, control-plane IP, firewall and worker, each in its metal-api.
    assert_eq!(
        (own.0, own.2.len()),
        (own_before.0 + 1, own_before.2.len() + 2)
    );
    assert_eq!(
        (theirs.0, theirs.2.len()),
        (other_before.0 + 1, other_before.2.len() + 2)
    );
    assert!(
        theirs.1 > other_before.1,
        "no IP in the Secret's metal-api: {theirs:?}"
    );

    // metal-api's key rotated while a worker of cluster B provisions (allocated, held before
    // it phones home), and the Secret with it: the worker gets ready on the one machine.
    hold_phone_home(&other, true);
    env.add_lab_machine(OTHER, "worker-b2", "bootstrap").await;
    eventually(
        "worker-b2 allocated",
        support::LOADED_MACHINE_WAIT,
        || async { (allocated(&other).2.len() > theirs.2.len()).then_some(()) },
    )
    .await;
    other
        .sim
        .rotate_hmac_key(AuthType::Edit, "rotated-edit".into());
    env.apply(credentials(&other.url, "rotated-edit")).await;
    hold_phone_home(&other, false);
    wait_ready(&env, &machines, "worker-b2", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let b2 = env.machine_of("worker-b2").await;
    let theirs = allocated(&other);
    assert!(theirs.2.contains(&b2), "{theirs:?}");
    assert_eq!(
        theirs.2.len(),
        other_before.2.len() + 3,
        "one machine for worker-b2: {theirs:?}"
    );

    // A leak of cluster B's (a machine carrying the marks of a MetalStackMachine that is
    // gone) is found and freed by the orphan sweep, with cluster B's credentials.
    let msc_b = clusters.get(OTHER).await.expect("cluster B");
    let network_b = msc_b.status.and_then(|s| s.network_id).expect("network");
    let cluster_b = format!("{}.{OTHER}", env.ns.name);
    let tags = super::orphans::marks(&env.ns.name, "gone", &cluster_b, true);
    let request = super::orphans::planted(&network_b, tags);
    let leak = other
        .sim
        .state()
        .machine_allocate(&request, None, "machine", "capms");
    let leak = leak.expect("planted").id;
    eventually(
        "cluster B's leak freed",
        support::LOADED_MACHINE_WAIT,
        || async { (!allocated(&other).2.contains(&leak)).then_some(()) },
    )
    .await;

    // A machine of cluster B naming cluster A's worker, marked by hand as cloned from a
    // template (what lets an object skip admission's checks): its metal-api has no such machine.
    env.apply(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
        "metadata": {"name": "intruder", "annotations": {
            "cluster.x-k8s.io/cloned-from-name": "workers",
            "cluster.x-k8s.io/cloned-from-groupkind": "MetalStackMachineTemplate.infrastructure.cluster.x-k8s.io"}},
        "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86",
                 "providerID": format!("metalstack://{a}")}
    }))
    .await;
    env.add_owning_machine(OTHER, "intruder", "bootstrap").await;
    let not_there = format!("machine {a} does not exist in metal-api");
    wait_condition(
        &machines,
        "intruder",
        "the other metal-api's machine not found",
        |m| {
            let conditions = m.status.as_ref().map(|s| s.conditions.as_slice());
            conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.message.contains(&not_there))
        },
    )
    .await;
    assert_eq!(allocated(&env.sim), own, "capms's own metal-api changed");
    assert_eq!(allocated(&other), theirs, "the Secret's metal-api changed");

    let capi = env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
    for name in [MSC, OTHER] {
        capi.delete(name, &DeleteParams::foreground())
            .await
            .expect("delete the Cluster");
    }
    eventually(
        "everything freed in both metal-apis",
        support::LOADED_MACHINE_WAIT,
        || async {
            let freed = allocated(&env.sim) == own_before && allocated(&other) == other_before;
            freed.then_some(())
        },
    )
    .await;
}
