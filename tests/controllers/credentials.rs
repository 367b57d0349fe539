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

/// The lab inventory of another metal-api: its machines have ids and racks of their own.
fn other_inventory() -> Inventory {
    let mut lab = Inventory::default_lab();
    for (n, machine) in lab.machines.iter_mut().enumerate() {
        machine.id = format!("00000000-0000-0000-00b0-{n:012}");
        machine.rack = format!("b-{}", machine.rack);
    }
    lab
}

/// The racks cluster `msc` reports as failure domains.
fn failure_domains(msc: &MetalStackCluster) -> Vec<String> {
    let status = msc.status.as_ref();
    let domains = status.map(|s| s.failure_domains.iter().map(|d| d.name.clone()));
    domains.into_iter().flatten().collect()
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
pub(super) fn allocated(sim: &RunningSim) -> (usize, usize, Vec<String>) {
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
    let missing = format!("the credentials {origin} named in spec.credentialsRef does not exist");
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

/// Two teams, each in its namespace with a credentials Secret of the same name for its own
/// metal-api, provision clusters of the same name at once under one capms watching every
/// namespace: each cluster's network, IP, firewall and worker are made in its team's metal-api
/// only, nothing with capms's own credentials, each reports its own metal-api's racks as
/// failure domains, a machine template says what a node of its team's metal-api's size has,
/// and deleting them frees everything in each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_teams_in_two_namespaces_provision_at_once_each_in_its_own_metal_api() {
    let cp = ControlPlane::management("teams");
    let a = Env::on(&cp, "team-a", Inventory::default_lab()).await;
    let mut b = Env::on(&cp, "team-b", other_inventory()).await;
    let own = RunningSim::start(Inventory::default_lab(), "/metal").await;
    b.every_namespace = true;
    let port = free_port();
    let own_url = [("METAL_API_URL", own.url.as_str())];
    b.capms = Some(b.spawn_capms_with_env("capms", &[], port, &own_url));
    b.metrics_port = Some(port);
    let before = [allocated(&own), allocated(&a.sim), allocated(&b.sim)];

    for team in [&a, &b] {
        team.apply(credentials(&team.sim.url, "metal-edit")).await;
        let mut cluster = lab_cluster();
        cluster["spec"]["credentialsRef"] = json!({"name": SECRET});
        team.apply_seed_cluster(MSC, cluster).await;
        team.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
        team.add_lab_machine(MSC, "worker", "bootstrap").await;
    }
    for (team, racks) in [(&a, ["rack-1", "rack-2"]), (&b, ["b-rack-1", "b-rack-2"])] {
        let clusters: Api<MetalStackCluster> = Api::namespaced(team.client(), &team.ns.name);
        let machines: Api<MetalStackMachine> = Api::namespaced(team.client(), &team.ns.name);
        // capms's log is `b`'s.
        wait_ready(&b, &clusters, MSC, |c| {
            c.status.as_ref().is_some_and(|s| s.ready) && failure_domains(c) == racks
        })
        .await;
        wait_ready(&b, &machines, "worker", |m| {
            m.status.as_ref().is_some_and(|s| s.ready)
        })
        .await;
    }
    assert_eq!(
        allocated(&own),
        before[0],
        "made with capms's own credentials"
    );
    for (team, before) in [(&a, &before[1]), (&b, &before[2])] {
        let now = allocated(&team.sim);
        let worker = team.machine_of("worker").await;
        assert!(now.2.contains(&worker), "{}: {now:?}", team.ns.name);
        // Its network, control-plane IP, firewall and worker.
        assert_eq!(
            (now.0, now.2.len()),
            (before.0 + 1, before.2.len() + 2),
            "{}: {now:?}",
            team.ns.name
        );
        assert!(now.1 > before.1, "{}: no IP: {now:?}", team.ns.name);
    }

    // A size only team B's metal-api has: its template's capacity; team A's a condition.
    {
        let mut state = b.sim.sim.state();
        let mut large = state.sizes["v1-small-x86"].clone();
        large.id = "b-large-x86".into();
        state.sizes.insert(large.id.clone(), large);
    }
    for team in [&a, &b] {
        team.apply(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachineTemplate",
            "metadata": {"name": "large"},
            "spec": {"template": {"spec": {"image": "ubuntu-26.4", "machineType": "b-large-x86"}}}
        }))
        .await;
    }
    for (team, known) in [(&a, "False"), (&b, "True")] {
        let kind = "MetalStackMachineTemplate";
        let templates = team.dynamic(
            "infrastructure.cluster.x-k8s.io/v1alpha4",
            kind,
            "metalstackmachinetemplates",
        );
        eventually_seen(
            &format!("{}'s template's capacity known: {known}", team.ns.name),
            support::LOADED_MACHINE_WAIT,
            || async {
                let t = templates.get("large").await.map_err(|e| e.to_string())?;
                let status = &t.data["status"];
                let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
                let seen = conditions.iter().find(|c| c["type"] == "CapacityKnown");
                let capacity = status.get("capacity").is_some();
                match seen {
                    Some(c) if c["status"] == known && capacity == (known == "True") => Ok(()),
                    _ => Err(format!("status {status}")),
                }
            },
        )
        .await;
    }

    for team in [&a, &b] {
        let capi = team.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
        capi.delete(MSC, &DeleteParams::foreground())
            .await
            .expect("delete the Cluster");
    }
    eventually(
        "everything freed in both teams' metal-apis",
        support::LOADED_MACHINE_WAIT,
        || async {
            let now = [allocated(&own), allocated(&a.sim), allocated(&b.sim)];
            (now == before).then_some(())
        },
    )
    .await;
}
