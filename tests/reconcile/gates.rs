//! A MetalStackMachine meets its gates in the order observe reads them; decide only reports the
//! first closed one. Each step here opens one gate and shows the next one closed.

use super::*;

/// The stored object as JSON.
fn stored<K>(rig: &Rig, obj: &K) -> serde_json::Value
where
    K: Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
{
    serde_json::to_value(rig.api.get(obj)).expect("json")
}

/// The reason of the stored object's condition `type_`, if it has one.
fn reason<K>(rig: &Rig, obj: &K, type_: &str) -> Option<String>
where
    K: Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
{
    let stored = stored(rig, obj);
    let conditions = stored.pointer("/status/conditions")?.as_array()?.clone();
    let found = conditions.into_iter().find(|c| c["type"] == type_)?;
    found["reason"].as_str().map(str::to_owned)
}

fn has_finalizer<K>(rig: &Rig, obj: &K) -> bool
where
    K: Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
{
    let stored = stored(rig, obj);
    let finalizers = stored
        .pointer("/metadata/finalizers")
        .and_then(|f| f.as_array());
    finalizers.is_some_and(|f| !f.is_empty())
}

/// One reconcile of the stored object; its writes.
async fn once<R: Reconciler>(rig: &Rig, obj: &R::Object) -> Vec<Write>
where
    R::Object: serde::Serialize,
{
    let (rounds, _) = walk::<R>(rig, obj, 1, |_| true).await;
    rounds.into_iter().flatten().collect()
}

/// Its paused annotation set or removed on the stored `obj`.
fn set_paused<K>(rig: &Rig, obj: &K, paused: bool)
where
    K: Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut stored = rig.api.get(obj);
    let annotation = capms::capi::PAUSED_ANNOTATION.to_owned();
    stored.meta_mut().annotations = paused.then(|| [(annotation, String::new())].into());
    rig.api.put(&stored);
}

#[tokio::test]
async fn a_machine_meets_its_gates_in_order() {
    // The Cluster and its MetalStackCluster, not provisioned yet.
    let (rig, msc) = cluster_rig().await;
    let msm = metal_stack_machine();
    rig.api.put(&msm);
    set_paused(&rig, &msm, true);

    // Its Machine is not there: nothing is written, not even the pause.
    assert!(
        once::<Machines>(&rig, &msm).await.is_empty(),
        "no write without the Machine"
    );

    // The Machine, not naming its bootstrap data yet: the pause is reported, nothing else.
    let mut machine = capi_machine();
    machine.spec.bootstrap.data_secret_name = None;
    rig.api.put(&machine);
    once::<Machines>(&rig, &msm).await;
    assert_eq!(reason(&rig, &msm, "Paused").as_deref(), Some("Paused"));
    assert!(
        !has_finalizer(&rig, &msm),
        "a paused object is not taken up"
    );

    // Unpaused: the cluster's infrastructure is awaited before the Machine's bootstrap data.
    set_paused(&rig, &msm, false);
    once::<Machines>(&rig, &msm).await;
    let infrastructure = Some("WaitingForClusterInfrastructure".to_owned());
    assert_eq!(reason(&rig, &msm, "Ready"), infrastructure);
    assert_eq!(reason(&rig, &msm, "Paused").as_deref(), Some("NotPaused"));

    // The cluster provisioned: the Machine's bootstrap data is awaited.
    walk::<Clusters>(&rig, &msc, 8, ready).await;
    once::<Machines>(&rig, &msm).await;
    let bootstrap_data = Some("WaitingForBootstrapData".to_owned());
    assert_eq!(reason(&rig, &msm, "Ready"), bootstrap_data);
    assert!(!has_finalizer(&rig, &msm), "taken up only with a machine");

    // The bootstrap data there: allocated, then named and taken up in one write.
    rig.api.put(&capi_machine());
    rig.api.put(&bootstrap());
    once::<Machines>(&rig, &msm).await;
    assert!(
        !has_finalizer(&rig, &msm),
        "allocating writes nothing to the object"
    );
    once::<Machines>(&rig, &msm).await;
    assert!(
        has_finalizer(&rig, &msm),
        "taken up with the machine's name"
    );
    assert!(rig.api.get(&msm).spec.provider_id.is_some());
}

#[tokio::test]
async fn a_firewall_meets_its_gates_in_order() {
    // The Cluster and its MetalStackCluster, which has no private network yet.
    let (rig, msc) = cluster_rig().await;
    let spec = MetalStackFirewallSpec {
        image: "firewall-ubuntu-3.0".into(),
        machine_type: "v1-small-x86".into(),
        ..Default::default()
    };
    let mut fw = MetalStackFirewall::new("prod-firewall", spec);
    fw.metadata.namespace = Some(NS.into());
    fw.metadata.uid = Some("uid-fw".into());
    let mut owner = owner("MetalStackCluster", "prod");
    owner.api_version = "infrastructure.cluster.x-k8s.io/v1alpha4".into();
    fw.metadata.owner_references = Some(vec![owner]);
    rig.api.put(&fw);
    set_paused(&rig, &fw, true);

    // Paused: reported, and the firewall is not taken up.
    once::<Firewalls>(&rig, &fw).await;
    assert_eq!(reason(&rig, &fw, "Paused").as_deref(), Some("Paused"));
    assert!(
        !has_finalizer(&rig, &fw),
        "a paused firewall is not taken up"
    );

    // Unpaused: the cluster's private network is awaited.
    set_paused(&rig, &fw, false);
    once::<Firewalls>(&rig, &fw).await;
    let network = Some("WaitingForNetwork".to_owned());
    assert_eq!(reason(&rig, &fw, "Ready"), network);
    assert!(!has_finalizer(&rig, &fw), "not taken up without a network");

    // The cluster provisioned (its network allocated): allocated, then taken up in the write
    // that names the firewall's machine.
    walk::<Clusters>(&rig, &msc, 8, ready).await;
    once::<Firewalls>(&rig, &fw).await;
    assert!(
        !has_finalizer(&rig, &fw),
        "allocating writes nothing to the object"
    );
    once::<Firewalls>(&rig, &fw).await;
    assert!(has_finalizer(&rig, &fw), "taken up with its machine's name");
    assert!(rig.api.get(&fw).spec.provider_id.is_some());
}

#[tokio::test]
async fn a_cluster_meets_its_gates_in_order() {
    let rig = rig().await;
    let msc = metal_stack_cluster(None);
    rig.api.put(&msc);
    set_paused(&rig, &msc, true);

    // Its Cluster is not there: said, before the pause.
    once::<Clusters>(&rig, &msc).await;
    let waiting = Some("WaitingForCluster".to_owned());
    assert_eq!(reason(&rig, &msc, "Ready"), waiting);
    assert_eq!(
        reason(&rig, &msc, "Paused"),
        None,
        "the pause is not looked at yet"
    );

    // The Cluster: the pause is reported, and the object is not taken up.
    rig.api.put(&capi_cluster());
    once::<Clusters>(&rig, &msc).await;
    assert_eq!(reason(&rig, &msc, "Paused").as_deref(), Some("Paused"));
    assert!(
        !has_finalizer(&rig, &msc),
        "a paused cluster is not taken up"
    );

    // Unpaused: taken up before anything is allocated.
    set_paused(&rig, &msc, false);
    once::<Clusters>(&rig, &msc).await;
    assert!(has_finalizer(&rig, &msc), "the finalizer first");
    let network = reason(&rig, &msc, "NetworkReady");
    assert_eq!(network, None, "nothing allocated with the finalizer");
}
