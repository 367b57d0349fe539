//! A cluster on metal-apiserver: its MetalStackCluster names a credentials Secret of API v2 (the
//! metal-apiserver's URL, a project token, its project), and its network, control-plane IP,
//! firewall and worker are made through v2 (the allocations carry v2's labels, which v1's do
//! not), reach ready, and are freed when the cluster is deleted. The token lists the methods of
//! visibility SELF capms calls, as an operator's token must. It lives two minutes: capms
//! refreshes it before it expires and writes the new one back to the Secret, and a second worker
//! provisions after the first token has expired.

use super::credentials::allocated;
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_api_v2_credentials_provisions_and_frees_through_metal_apiserver() {
    let mut env = Env::with_inventory("api-v2", Inventory::default_lab()).await;
    // Ready objects reconciled only every 5 minutes (the default): the two-minute token is
    // refreshed in its second half while nothing reconciles them.
    env.start_capms(&[]);
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let before = allocated(&env.sim);
    let first = env.use_api_v2(Some("120s")).await;
    let token = first.secret.as_str();
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.add_lab_machine(MSC, "worker", "bootstrap").await;
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    wait_ready(&env, &machines, "worker", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;

    let now = allocated(&env.sim);
    assert_eq!(
        (now.0, now.2.len()),
        (before.0 + 1, before.2.len() + 2),
        "its network, firewall and worker: {now:?}"
    );
    assert!(now.1 > before.1, "no control-plane IP: {now:?}");
    let worker = env.machine_of("worker").await;
    {
        let state = env.sim.sim.state();
        let made = now.2.iter().filter(|id| !before.2.contains(id));
        for id in made {
            let labels = &state.machines[id].allocation_labels;
            assert!(
                labels.contains_key(metal_api::tags::CLUSTER_ID),
                "machine {id} not made through v2: {labels:?}"
            );
        }
        assert!(now.2.contains(&worker));
    }
    assert!(!env.capms_log().contains(token), "the token in capms's log");

    // Refreshed before it expires, and written back to the Secret.
    let refreshed = eventually(
        "the refreshed token in the Secret",
        support::LOADED_MACHINE_WAIT,
        || async { env.v2_token().await.filter(|now| now != token) },
    )
    .await;
    let left = first.expires.duration_since(jiff::Timestamp::now());
    if left.is_positive() {
        // Until the first token's expiry (a time on the clock, at most two minutes), so that
        // sleep-ok: what follows can only be done with the refreshed token.
        tokio::time::sleep(left.unsigned_abs() + Duration::from_secs(1)).await;
    }
    env.add_lab_machine(MSC, "worker-2", "bootstrap").await;
    wait_ready(&env, &machines, "worker-2", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert!(
        !env.capms_log().contains(&refreshed),
        "the refreshed token in capms's log"
    );

    deleted_and_freed(&env, &before, "everything freed through v2").await;
}

/// A running cluster's credentials Secret moved from metal-api (v1, an HMAC key) to
/// metal-apiserver (v2, a project token): capms adopts what v1 allocated (its machines are found
/// by the tags v1 gave them, now their labels), allocates nothing again and frees nothing; a
/// worker added then is made through v2, and deleting the cluster frees, through v2, what both
/// allocated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_cluster_moved_from_v1_to_v2_credentials_keeps_everything_it_has() {
    let mut env = Env::with_inventory("v1-to-v2", Inventory::default_lab()).await;
    env.start_capms(&["--sync-period=5s"]);
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let before = allocated(&env.sim);
    env.apply(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "metal"},
        "stringData": {"url": env.sim.url, "hmac": "metal-edit"}}),
    )
    .await;
    let mut cluster = lab_cluster();
    cluster["spec"]["credentialsRef"] = json!({"name": "metal"});
    env.apply_seed_cluster(MSC, cluster).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.add_lab_machine(MSC, "worker", "bootstrap").await;
    // On v1 the cluster's racks are failure domains.
    wait_ready(&env, &clusters, MSC, |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.ready && !s.failure_domains.is_empty())
    })
    .await;
    wait_ready(&env, &machines, "worker", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let on_v1 = allocated(&env.sim);

    let minted = env.sim.mint_capms_token(LAB_PROJECT, None).await;
    let token = minted["secret"].as_str().expect("a token");
    env.apply(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "metal"},
        "stringData": env.sim.v2_credentials(token, LAB_PROJECT)}),
    )
    .await;
    // The Secret is read again within 30 s; from then on capms calls through v2.
    eventually(
        "capms calling through v2",
        support::LOADED_MACHINE_WAIT,
        || async {
            let report = env.sim.sim.stats().report();
            let v2 = report.requests.iter().any(|r| {
                r.route.starts_with("/metalstack.api.v2.MachineService/") && r.status == 200
            });
            v2.then_some(())
        },
    )
    .await;
    env.add_lab_machine(MSC, "worker-2", "bootstrap").await;
    wait_ready(&env, &machines, "worker-2", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let second = env.machine_of("worker-2").await;
    {
        let state = env.sim.sim.state();
        let labels = &state.machines[&second].allocation_labels;
        assert!(
            labels.contains_key(metal_api::tags::CLUSTER_ID),
            "worker-2 not made through v2: {labels:?}"
        );
    }
    let on_v2 = allocated(&env.sim);
    let mut expected = on_v1.2.clone();
    expected.push(second);
    let (mut have, mut want) = (on_v2.2.clone(), expected);
    have.sort();
    want.sort();
    assert_eq!(
        have, want,
        "v1's machines kept, worker-2's added, nothing else"
    );
    assert_eq!(
        (on_v2.0, on_v2.1),
        (on_v1.0, on_v1.1 + 1),
        "networks and IPs kept, worker-2's address added"
    );
    // A project token sees no free machines and cannot pin one to a rack: no failure domains.
    wait_ready(&env, &clusters, MSC, |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.ready && s.failure_domains.is_empty())
    })
    .await;

    deleted_and_freed(&env, &before, "everything freed through v2").await;
}

/// v2 calls the simulator answered so far.
fn v2_calls(env: &Env) -> u64 {
    let report = env.sim.sim.stats().report();
    let v2 = report.requests.iter();
    let v2 = v2.filter(|r| r.route.starts_with("/metalstack.api.v2."));
    v2.map(|r| r.count).sum()
}

/// A running cluster's token revoked, then replaced by one of another project, then by one
/// that has expired: each is a Ready False condition on the MetalStackCluster naming the
/// Secret, the call and what metal-apiserver said; nothing is freed or allocated, and capms
/// does not call again and again. A valid token in the Secret is taken up without a restart,
/// and the cluster is freed with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_or_foreign_token_is_a_condition_naming_the_secret_and_frees_nothing() {
    let mut env = Env::with_inventory("v2-refused", Inventory::default_lab()).await;
    env.start_capms(&["--sync-period=5s"]);
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let initial = allocated(&env.sim);
    let first = env.use_api_v2(None).await;
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.add_lab_machine(MSC, "worker", "bootstrap").await;
    wait_ready(&env, &machines, "worker", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let running = allocated(&env.sim);
    let origin = format!("Secret {}/{V2_SECRET}", env.ns.name);

    let refused = |what: &str| {
        let naming = [origin.as_str(), "/metalstack.api.v2.", what];
        not_ready("MetalUnauthorized", naming.map(String::from).to_vec())
    };
    env.sim.revoke_v2(&first.uuid).await;
    let revoked = "a condition naming the Secret, the call and the revoked token";
    wait_condition(&clusters, MSC, revoked, refused("token was revoked")).await;
    quiet_and_unchanged(&env, &running).await;

    let foreign = env
        .sim
        .mint_capms_token("00000000-0000-0000-0000-000000000002", None);
    let foreign = foreign.await["secret"]
        .as_str()
        .expect("a token")
        .to_owned();
    set_in_secret(&env, "token", &foreign).await;
    let other = "a condition naming the Secret, the call and the project refused";
    wait_condition(&clusters, MSC, other, refused("not allowed")).await;
    quiet_and_unchanged(&env, &running).await;

    // A token that expired before capms could refresh it (a lifetime of a second).
    let expired = env.sim.mint_capms_token(LAB_PROJECT, Some("1s")).await;
    set_in_secret(&env, "token", expired["secret"].as_str().expect("a token")).await;
    let expiry = "a condition naming the Secret, the call and the expired token";
    wait_condition(&clusters, MSC, expiry, refused("token is expired")).await;
    quiet_and_unchanged(&env, &running).await;

    let fresh = env.sim.mint_capms_token(LAB_PROJECT, None).await;
    set_in_secret(&env, "token", fresh["secret"].as_str().expect("a token")).await;
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    assert_eq!(allocated(&env.sim), running, "allocated or freed");
    let log = env.capms_log();
    for token in [&first.secret, &foreign] {
        assert!(!log.contains(token.as_str()), "a token in capms's log");
    }

    deleted_and_freed(&env, &initial, "everything freed with the valid token").await;
}

/// Is the MetalStackCluster's Ready condition False with `reason` and a message holding each
/// of `naming`?
fn not_ready(reason: &'static str, naming: Vec<String>) -> impl Fn(&MetalStackCluster) -> bool {
    move |msc: &MetalStackCluster| {
        let ready = msc
            .status
            .as_ref()
            .and_then(|s| condition(&s.conditions, "Ready"));
        ready.is_some_and(|r| {
            r.status == "False"
                && r.reason == reason
                && naming.iter().all(|n| r.message.contains(n.as_str()))
        })
    }
}

/// The credentials Secret's `key` (its `token`, its `url`) replaced by `value`.
async fn set_in_secret(env: &Env, key: &str, value: &str) {
    let secrets: Api<Secret> = Api::namespaced(env.client(), &env.ns.name);
    let patch = json!({"stringData": {key: value}});
    secrets
        .patch(V2_SECRET, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("the new {key} in the Secret: {e}"));
}

/// Over 30 s of refusals capms calls metal-apiserver a few times, not again and again, and
/// metal-api holds what it held when the cluster ran.
async fn quiet_and_unchanged(env: &Env, running: &(usize, usize, Vec<String>)) {
    let calls = v2_calls(env);
    // sleep-ok: a window to count the calls capms makes while it is refused.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let made = v2_calls(env) - calls;
    assert!(made <= 30, "{made} calls in 30 s of refusals");
    assert_eq!(&allocated(&env.sim), running, "allocated or freed");
}

/// The Cluster deleted, and metal-api back at `before` (what it held before the cluster).
async fn deleted_and_freed(env: &Env, before: &(usize, usize, Vec<String>), what: &str) {
    let capi = env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters");
    capi.delete(MSC, &DeleteParams::foreground())
        .await
        .expect("delete the Cluster");
    eventually(what, support::LOADED_MACHINE_WAIT, || async {
        (allocated(&env.sim) == *before).then_some(())
    })
    .await;
}

/// A credentials Secret of API v2 whose URL does not lead to metal-apiserver: nothing answers
/// there, a server answers with what does not fit the protos, or metal-api v1 answers (its
/// URL given for v2's). Each is a Ready False condition on the MetalStackCluster naming the
/// Secret and the call; nothing is allocated; the misfit answers are not asked for again and
/// again. The right URL is taken up without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_url_that_is_not_metal_apiserver_s_is_a_condition_naming_the_secret() {
    let mut env = Env::with_inventory("v2-wrong-url", Inventory::default_lab()).await;
    env.start_capms(&["--sync-period=5s"]);
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let initial = allocated(&env.sim);
    env.use_api_v2(None).await;
    let origin = format!("Secret {}/{V2_SECRET}", env.ns.name);

    set_in_secret(
        &env,
        "url",
        &format!("http://127.0.0.1:{}", support::free_port()),
    )
    .await;
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    let unreachable = vec![format!("(as {origin} gives it) could not be reached")];
    let what = "a condition naming the Secret of the unanswering URL";
    wait_condition(
        &clusters,
        MSC,
        what,
        not_ready("MetalUnreachable", unreachable),
    )
    .await;

    let (misfit, answered) = misfit_server().await;
    set_in_secret(&env, "url", &misfit).await;
    let naming = vec![
        format!("(as {origin} gives it) sent a response capms cannot read"),
        "/metalstack.api.v2.NetworkService/List: the answer does not fit its message".into(),
    ];
    let what = "a condition naming the Secret, the call and the answer that does not fit";
    wait_condition(&clusters, MSC, what, not_ready("MetalBadResponse", naming)).await;
    let before = answered.load(std::sync::atomic::Ordering::Relaxed);
    // sleep-ok: a window to count the calls capms makes while the answers do not fit.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let made = answered.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(
        made <= 30,
        "{made} calls in 30 s of answers that do not fit"
    );

    set_in_secret(&env, "url", &env.sim.url.clone()).await;
    let naming = vec![
        "/metalstack.api.v2.NetworkService/List: Unimplemented".into(),
        format!("(the URL {origin} gives serves no such procedure: not metal-apiserver"),
    ];
    let what = "a condition naming the Secret, the call and metal-api v1's 404";
    wait_condition(&clusters, MSC, what, not_ready("MetalServerError", naming)).await;
    assert_eq!(
        allocated(&env.sim),
        initial,
        "allocated through a wrong URL"
    );

    set_in_secret(&env, "url", &env.sim.v2_url()).await;
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    deleted_and_freed(&env, &initial, "everything freed through the right URL").await;
}

/// A server on loopback answering every call 200 with JSON that fits none of metal-apiserver's
/// messages (a list where each answer holds a message, or a string); its URL and the count of
/// calls it answered.
async fn misfit_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = answered.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let body = r#"{"networks": "none", "ips": "none", "machines": "none",
                "network": [], "ip": [], "machine": [], "project": [], "partitions": "none",
                "sizes": "none", "images": "none", "token": []}"#;
            ([("content-type", "application/json")], body)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, answered)
}
