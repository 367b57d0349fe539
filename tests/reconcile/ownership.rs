//! Whose is what: objects managed elsewhere, deletions capms keeps its hands off, machines lost
//! behind capms's back, and objects re-created by a restore.

use super::*;

#[tokio::test]
async fn objects_managed_by_someone_else_are_never_written() {
    let rig = rig().await;
    let mut msm = metal_stack_machine();
    msm.metadata.annotations = Some(
        [(
            capms::capi::MANAGED_BY_ANNOTATION.to_owned(),
            "other".to_owned(),
        )]
        .into(),
    );
    rig.api.put(&msm);
    let mut fw = MetalStackFirewall::new("fw", MetalStackFirewallSpec::default());
    fw.metadata.namespace = Some(NS.into());
    fw.metadata.annotations = msm.metadata.annotations.clone();
    rig.api.put(&fw);
    let action = reconcile::<Machines>(Arc::new(msm), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(action, Action::await_change());
    reconcile::<Firewalls>(Arc::new(fw), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert!(rig.api.take_writes().is_empty());
}

#[tokio::test]
async fn deletions_while_paused_or_moved_away_free_nothing_and_write_nothing() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    let machine_id = provisioned_machine(&rig, &msc).await;
    let msm = metal_stack_machine();
    let network = rig
        .api
        .get(&msc)
        .status
        .and_then(|s| s.network_id)
        .expect("network");
    rig.api.take_writes();

    // clusterctl move deletes the source's objects with its annotation after moving them.
    mark_deleted(&rig, &msm, Some(capms::capi::DELETE_FOR_MOVE_ANNOTATION));
    let action = reconcile::<Machines>(Arc::new(rig.api.get(&msm)), rig.ctx.clone())
        .await
        .expect("reconcile");
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));

    // A paused Cluster: its MetalStackCluster's deletion waits too.
    let mut paused = capi_cluster();
    paused.spec.paused = Some(true);
    rig.api.put(&paused);
    mark_deleted(&rig, &msc, None);
    reconcile::<Clusters>(Arc::new(rig.api.get(&msc)), rig.ctx.clone())
        .await
        .expect("reconcile");
    let writes: Vec<Write> = rig.api.take_writes();
    assert!(writes.is_empty(), "hands off: {writes:#?}");
    let editor = rig.sim.editor();
    let machine = editor.machine(&machine_id).await.expect("machine");
    assert!(
        machine.allocation.is_some(),
        "the machine is still allocated"
    );
    editor
        .network(&network)
        .await
        .expect("the network is still there");
    assert!(
        rig.api
            .get(&msm)
            .metadata
            .finalizers
            .is_some_and(|f| !f.is_empty())
    );

    // Unpaused, a deletion of the cluster's own objects goes ahead.
    rig.api.put(&capi_cluster());
    let plain = {
        let mut m = rig.api.get(&msm);
        m.metadata.annotations = None;
        m
    };
    rig.api.put(&plain);
    walk::<Machines>(&rig, &msm, 3, |m| {
        m.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
    })
    .await;
    let freed = editor.machine(&machine_id).await.expect("machine");
    assert!(freed.allocation.is_none(), "freed once unpaused");
}

#[tokio::test]
async fn a_machine_freed_behind_capms_back_is_reported_not_replaced() {
    // A machine is checked against its cluster's listing, which may be a little old: up to 2 s
    // while it boots, half the sync period once it is ready.
    let rig = rig_with(Settings {
        sync_period: Duration::from_secs(2),
        ..Default::default()
    })
    .await;
    let msc = metal_stack_cluster(None);
    let machine_id = provisioned_machine(&rig, &msc).await;
    let msm = metal_stack_machine();
    let editor = rig.sim.editor();
    let allocated = || async {
        let all = editor
            .machine_find(&Default::default())
            .await
            .expect("machines");
        all.iter().filter(|m| m.allocation.is_some()).count()
    };
    let before = allocated().await;
    editor
        .machine_free(&machine_id)
        .await
        .expect("freed outside capms");
    // sleep-ok: the ready machine's listing ages past its limit (half the 2 s sync period).
    tokio::time::sleep(Duration::from_millis(2100)).await;
    for _ in 0..3 {
        reconcile::<Machines>(Arc::new(rig.api.get(&msm)), rig.ctx.clone())
            .await
            .expect("reconcile");
    }
    assert_eq!(allocated().await, before - 1, "no replacement allocated");
    let status = rig.api.get(&msm).status.expect("status");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "MachineLost")
    );
    assert!(ready.message.contains(&machine_id), "{}", ready.message);
    assert_eq!(status.failure_reason.as_deref(), Some("UpdateError"));
}

/// What the simulator holds: (networks, IPs, allocated machines).
async fn allocations(rig: &Rig) -> (usize, usize, usize) {
    let editor = rig.sim.editor();
    let networks = editor.networks().await.expect("networks");
    let ips = editor
        .ip_find(&metal_api::types::IpFindRequest::default())
        .await
        .expect("ips");
    let machines = editor
        .machine_find(&Default::default())
        .await
        .expect("machines");
    (
        networks
            .iter()
            .filter(|n| n.parentnetworkid.is_some())
            .count(),
        ips.len(),
        machines.iter().filter(|m| m.allocation.is_some()).count(),
    )
}

/// As a restore from backup (or clusterctl move) leaves an object: the spec, a new UID, no
/// status, no finalizers.
fn restored<K>(rig: &Rig, obj: &K, uid: &str) -> K
where
    K: Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut value = serde_json::to_value(rig.api.get(obj)).expect("json");
    if let Some(o) = value.as_object_mut() {
        o.remove("status");
    }
    value["metadata"]["uid"] = serde_json::json!(uid);
    value["metadata"]["finalizers"] = serde_json::Value::Null;
    let again: K = serde_json::from_value(value).expect("typed");
    rig.api.put(&again);
    again
}

#[tokio::test]
async fn restored_objects_adopt_what_they_had_and_allocate_nothing() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    let machine_id = provisioned_machine(&rig, &msc).await;
    let msm = metal_stack_machine();
    let before = allocations(&rig).await;
    assert_eq!(before.0, 1, "one private network");

    let msc = restored(&rig, &msc, "uid-msc-restored");
    let msm = restored(&rig, &msm, "uid-msm-restored");
    walk::<Clusters>(&rig, &msc, 6, ready).await;
    walk::<Machines>(&rig, &msm, 6, |m| {
        m.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "MachineAllocated" && c.status == "True")
        })
    })
    .await;
    assert_eq!(allocations(&rig).await, before, "zero new allocations");
    let adopted = rig.api.get(&msm);
    assert!(
        adopted
            .spec
            .provider_id
            .is_some_and(|p| p.ends_with(&machine_id)),
        "the same machine"
    );
}

/// A machine allocated for an object whose cluster's listing never heard of it (the listing is
/// a cache) is still freed before the object goes: for an object that names no machine, an
/// empty listing is confirmed with metal-api before capms lets go.
#[tokio::test]
async fn a_deleted_object_naming_no_machine_is_let_go_once_metal_api_confirms_it_owns_nothing() {
    // Taken up and naming no machine, as an earlier capms left an object it had not
    // allocated for yet (it wrote its finalizer first).
    let (rig, msm) = machine_rig().await;
    let mut taken_up = rig.api.get(&msm);
    taken_up.metadata.finalizers = Some(vec![capms::controllers::machine::FINALIZER.into()]);
    rig.api.put(&taken_up);
    let msc = rig.api.get(&metal_stack_cluster(None));
    let query = capms::controllers::allocation::teardown_query(NS, "prod");
    let listed = rig
        .ctx
        .listings
        .machines(rig.ctx.metal.own(), &query)
        .await
        .expect("listing");
    assert!(listed.is_empty(), "nothing allocated yet");

    // Allocated for the object behind the listing's back.
    let marks = capms::ownership::owner_marks_of(capms::ownership::OwnerKind::Machine, &msm);
    let mut tags = capms::ownership::owner_tags(&marks);
    tags.push(query.cluster_tag.clone());
    let network = msc.status.and_then(|s| s.network_id).expect("network");
    let mut request = super::listing::request(&network, "v1-small-x86");
    request.tags = tags;
    let machine = rig
        .sim
        .editor()
        .machine_allocate(&request)
        .await
        .expect("allocated");

    mark_deleted(&rig, &msm, None);
    walk::<Machines>(&rig, &msm, 3, |m| {
        m.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
    })
    .await;
    let freed = rig
        .sim
        .editor()
        .machine(&machine.id)
        .await
        .expect("machine");
    assert!(freed.allocation.is_none(), "freed before the object went");
    assert_eq!(allocations(&rig).await.2, 0);
}

/// The interleaving behind the machine a 10 × 100 run leaked. capms frees a machine for one
/// object; metal-api reclaims it and capms allocates it again, for another object, before the
/// first free's removal from the listings has reached that object's cluster (the removal waits
/// for each cluster's listing in turn, behind the finds in flight). That late removal must not
/// take the new allocation out of the listing, nor make capms believe it freed the machine for
/// the new object: deleted next, the new object would be let go with its machine allocated.
#[tokio::test]
async fn a_free_completing_late_never_lets_a_later_owner_of_the_machine_go_without_freeing_it() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    let machine_id = provisioned_machine(&rig, &msc).await;
    let msm = metal_stack_machine();
    let mut earlier = metal_stack_machine();
    earlier.metadata.name = Some("worker-replaced".into());
    let earlier = capms::ownership::identity_of(capms::ownership::OwnerKind::Machine, &earlier);
    // The first owner's free, reaching the listings only now.
    rig.ctx.listings.freed(&machine_id, &earlier).await;

    mark_deleted(&rig, &msm, None);
    walk::<Machines>(&rig, &msm, 3, |m| {
        m.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
    })
    .await;
    let machine = rig
        .sim
        .editor()
        .machine(&machine_id)
        .await
        .expect("machine");
    assert!(
        machine.allocation.is_none(),
        "machine {machine_id} left allocated for a deleted object: {:?}",
        machine.tags
    );
}
