//! What clusterctl move does to the source: it pauses the Cluster, then deletes the moved
//! objects with its delete-for-move annotation and strips their finalizers. capms keeps its
//! hands off: nothing in metal-api is freed, no finalizer is touched.

use super::looks::version_of;
use super::*;

/// Allocated machine ids, IPs and private networks, for comparing before and after.
async fn allocations(env: &Env) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (networks, ips, machines) = env.metal_state().await;
    let mut machines: Vec<String> = machines
        .into_iter()
        .filter(|m| m.allocation.is_some())
        .map(|m| m.id)
        .collect();
    machines.sort();
    let mut ips: Vec<String> = ips.into_iter().map(|ip| ip.ipaddress).collect();
    ips.sort();
    let mut networks: Vec<String> = networks.into_iter().map(|n| n.id).collect();
    networks.sort();
    (machines, ips, networks)
}

/// Patches the worker's MetalStackMachine, the firewall and the MetalStackCluster, in that order,
/// and deletes them when `delete` says so.
async fn for_each_object(env: &Env, worker: &str, patch: &Patch<Value>, delete: bool) {
    let params = PatchParams::default();
    let firewall = format!("{MSC}-firewall");
    let ns = &env.ns.name;
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), ns);
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), ns);
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), ns);
    machines.patch(worker, &params, patch).await.expect("patch");
    firewalls
        .patch(&firewall, &params, patch)
        .await
        .expect("patch");
    clusters.patch(MSC, &params, patch).await.expect("patch");
    if delete {
        let gone = DeleteParams::default();
        machines.delete(worker, &gone).await.expect("delete");
        firewalls.delete(&firewall, &gone).await.expect("delete");
        clusters.delete(MSC, &gone).await.expect("delete");
    }
}

/// Waits until capms has reconciled the worker, the firewall and the MetalStackCluster as they
/// are now (deleted) and took no step.
async fn looked_at_each(env: &Env, worker: &str) {
    let ns = &env.ns.name;
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), ns);
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), ns);
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), ns);
    let firewall = format!("{MSC}-firewall");
    let deleted = [
        (
            "MetalStackMachine",
            worker,
            version_of(&machines.get(worker).await.expect("msm")),
        ),
        (
            "MetalStackFirewall",
            firewall.as_str(),
            version_of(&firewalls.get(&firewall).await.expect("firewall")),
        ),
        (
            "MetalStackCluster",
            MSC,
            version_of(&clusters.get(MSC).await.expect("msc")),
        ),
    ];
    for (kind, name, version) in deleted {
        let looks = env.looked(kind, name, version, 1).await;
        assert_eq!(looks[0].step, "Nothing", "{looks:?}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn deleting_the_moved_objects_from_a_paused_source_frees_nothing() {
    let mut env = Env::with_inventory("move-source", Inventory::default_lab()).await;
    env.start_capms(&[]);
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.add_lab_machine(MSC, "worker-m", "bootstrap").await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    wait_ready(&env, &clusters, MSC, |c| {
        c.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    wait_ready(&env, &machines, "worker-m", |m| {
        m.status.as_ref().is_some_and(|s| s.ready)
    })
    .await;
    let before = allocations(&env).await;
    assert_eq!(before.0.len(), 2, "firewall and worker: {before:?}");

    // clusterctl move: pause the Cluster, then delete what it moved, annotated.
    pause(&env, true).await;
    env.paused_seen(true).await;
    let actions = env.actions().await;
    let annotate = Patch::Merge(
        json!({"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}}}),
    );
    for_each_object(&env, "worker-m", &annotate, true).await;
    // capms looked at each deleted object and kept its hands off.
    looked_at_each(&env, "worker-m").await;
    env.did_nothing_since(&actions, "deleting for a move").await;
    assert_eq!(
        allocations(&env).await,
        before,
        "nothing freed while deleting for move"
    );
    let held = machines.get("worker-m").await.expect("still there");
    assert!(
        held.metadata.finalizers.is_some_and(|f| !f.is_empty()),
        "capms keeps its finalizer"
    );

    // clusterctl strips the finalizers; the objects go and the allocations stay.
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for_each_object(&env, "worker-m", &strip, false).await;
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let firewall = format!("{MSC}-firewall");
    eventually(
        "the moved objects gone",
        Duration::from_secs(120),
        || async {
            let left = machines.get_opt("worker-m").await.ok()?.is_some()
                || firewalls.get_opt(&firewall).await.ok()?.is_some()
                || clusters.get_opt(MSC).await.ok()?.is_some();
            (!left).then_some(())
        },
    )
    .await;
    env.idle().await;
    env.did_nothing_since(&actions, "the moved objects going")
        .await;
    assert_eq!(
        allocations(&env).await,
        before,
        "the moved copy keeps everything"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn objects_re_created_without_status_adopt_everything_and_allocate_nothing() {
    let mut env = Env::with_inventory("restore", Inventory::default_lab()).await;
    env.start_capms(&[]);
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    env.add_lab_machine(MSC, "worker-r", "bootstrap").await;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), &env.ns.name);
    let ready_cluster = |c: &MetalStackCluster| c.status.as_ref().is_some_and(|s| s.ready);
    let ready_machine = |m: &MetalStackMachine| m.status.as_ref().is_some_and(|s| s.ready);
    wait_ready(&env, &clusters, MSC, ready_cluster).await;
    wait_ready(&env, &machines, "worker-r", ready_machine).await;
    let before = allocations(&env).await;

    // Paused, the objects are taken away (finalizers stripped) and come back from their spec.
    pause(&env, true).await;
    let firewall_name = format!("{MSC}-firewall");
    let saved = (
        clusters.get(MSC).await.expect("msc"),
        firewalls.get(&firewall_name).await.expect("firewall"),
        machines.get("worker-r").await.expect("msm"),
    );
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for_each_object(&env, "worker-r", &strip, true).await;
    eventually("the objects gone", Duration::from_secs(120), || async {
        clusters
            .get_opt(MSC)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    env.apply(re_created(&saved.0, None)).await;
    let new_uid = clusters.get(MSC).await.expect("msc").metadata.uid;
    env.apply(re_created(&saved.1, new_uid.as_deref())).await;
    env.apply(re_created(&saved.2, None)).await;
    pause(&env, false).await;

    wait_ready(&env, &clusters, MSC, ready_cluster).await;
    wait_ready(&env, &machines, "worker-r", ready_machine).await;
    assert_eq!(
        allocations(&env).await,
        before,
        "zero new allocations, none freed"
    );
}

/// Sets the Cluster's spec.paused.
pub(super) async fn pause(env: &Env, paused: bool) {
    env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .patch(
            MSC,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": paused}})),
        )
        .await
        .expect("pause");
}

/// `obj` as a restore (or clusterctl move) re-creates it: name, labels, annotations and
/// ownerReferences (`owner_uid` replacing the owner's old UID when given), the spec; no status.
pub(super) fn re_created<K>(obj: &K, owner_uid: Option<&str>) -> Value
where
    K: kube::Resource + serde::Serialize,
{
    let mut value = serde_json::to_value(obj).expect("json");
    let meta = obj.meta();
    let mut owners = serde_json::to_value(&meta.owner_references).expect("owners");
    if let (Some(uid), Some(list)) = (owner_uid, owners.as_array_mut()) {
        for o in list {
            o["uid"] = json!(uid);
        }
    }
    value["metadata"] = json!({
        "name": meta.name, "labels": meta.labels, "annotations": meta.annotations,
        "ownerReferences": owners,
    });
    if let Some(o) = value.as_object_mut() {
        o.remove("status");
    }
    value
}

/// clusterctl move as the controllers tests make it: the Cluster paused, capms's objects
/// deleted with clusterctl's annotation and their finalizers stripped, created again from their
/// spec without status, and the Cluster resumed; the next life of capms is the target's.
pub(super) async fn moved(env: &Env) {
    let saved = moved_away(env).await;
    moved_back(env, &saved).await;
}

/// capms's objects as they were before a move: the MetalStackCluster, the firewalls, the
/// machines.
pub(super) type Moved = (
    MetalStackCluster,
    Vec<MetalStackFirewall>,
    Vec<MetalStackMachine>,
);

/// The first half of a move: the Cluster paused and capms's objects gone from the source
/// (deleted with clusterctl's annotation, their finalizers stripped); what they were.
pub(super) async fn moved_away(env: &Env) -> Moved {
    pause(env, true).await;
    let ns = &env.ns.name;
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), ns);
    let firewalls: Api<MetalStackFirewall> = Api::namespaced(env.client(), ns);
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), ns);
    let saved = (
        clusters.get(MSC).await.expect("msc"),
        firewalls
            .list(&Default::default())
            .await
            .expect("firewalls")
            .items,
        machines
            .list(&Default::default())
            .await
            .expect("machines")
            .items,
    );
    let strip = Patch::Merge(json!({"metadata": {
        "annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}, "finalizers": null}}));
    let params = PatchParams::default();
    let dynamic = |kind: &str, plural: &str| {
        env.dynamic("infrastructure.cluster.x-k8s.io/v1alpha4", kind, plural)
    };
    let objects = [
        (
            dynamic("MetalStackMachine", "metalstackmachines"),
            names_of(&saved.2),
        ),
        (
            dynamic("MetalStackFirewall", "metalstackfirewalls"),
            names_of(&saved.1),
        ),
        (
            dynamic("MetalStackCluster", "metalstackclusters"),
            vec![MSC.to_owned()],
        ),
    ];
    for (api, names) in &objects {
        for name in names {
            api.patch(name, &params, &strip).await.expect("strip");
            api.delete(name, &Default::default()).await.expect("delete");
        }
    }
    eventually(
        "the moved objects gone",
        Duration::from_secs(120),
        || async {
            let left = machines.list(&Default::default()).await.ok()?.items.len()
                + firewalls.list(&Default::default()).await.ok()?.items.len();
            (clusters.get_opt(MSC).await.ok()?.is_none() && left == 0).then_some(())
        },
    )
    .await;
    saved
}

/// The second half of a move: the objects created again from their spec without status (the
/// firewalls owned by the new MetalStackCluster), and the Cluster resumed.
pub(super) async fn moved_back(env: &Env, saved: &Moved) {
    let clusters: Api<MetalStackCluster> = Api::namespaced(env.client(), &env.ns.name);
    env.apply(re_created(&saved.0, None)).await;
    let uid = clusters.get(MSC).await.expect("msc").metadata.uid;
    for f in &saved.1 {
        env.apply(re_created(f, uid.as_deref())).await;
    }
    for m in &saved.2 {
        env.apply(re_created(m, None)).await;
    }
    pause(env, false).await;
}

fn names_of<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items
        .iter()
        .map(|o| o.meta().name.clone().unwrap_or_default())
        .collect()
}
