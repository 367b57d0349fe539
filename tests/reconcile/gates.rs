//! A MetalStackMachine meets its gates in the order observe reads them; decide only reports the
//! first closed one. Each step here opens one gate and shows the next one closed.

use super::*;

/// The reason of the stored object's condition `type_`, if it has one.
fn reason(rig: &Rig, msm: &MetalStackMachine, type_: &str) -> Option<String> {
    let stored = rig.api.get(msm);
    let conditions = stored.status.map(|s| s.conditions).unwrap_or_default();
    let found = conditions.into_iter().find(|c| c.type_ == type_);
    found.map(|c| c.reason)
}

fn has_finalizer(rig: &Rig, msm: &MetalStackMachine) -> bool {
    let stored = rig.api.get(msm);
    stored.metadata.finalizers.is_some_and(|f| !f.is_empty())
}

/// One reconcile of the stored object; its writes.
async fn once(rig: &Rig, msm: &MetalStackMachine) -> Vec<Write> {
    let (rounds, _) = walk::<Machines>(rig, msm, 1, |_| true).await;
    rounds.into_iter().flatten().collect()
}

#[tokio::test]
async fn a_machine_meets_its_gates_in_order() {
    // The Cluster and its MetalStackCluster, not provisioned yet.
    let (rig, _) = cluster_rig().await;
    let mut msm = metal_stack_machine();
    let paused = capms::capi::PAUSED_ANNOTATION.to_owned();
    msm.metadata.annotations = Some([(paused.clone(), String::new())].into());
    rig.api.put(&msm);

    // Its Machine is not there: nothing is written, not even the pause.
    assert!(
        once(&rig, &msm).await.is_empty(),
        "no write without the Machine"
    );

    // The Machine, not naming its bootstrap data yet: the pause is reported, nothing else.
    let mut machine = capi_machine();
    machine.spec.bootstrap.data_secret_name = None;
    rig.api.put(&machine);
    once(&rig, &msm).await;
    assert_eq!(reason(&rig, &msm, "Paused").as_deref(), Some("Paused"));
    assert!(
        !has_finalizer(&rig, &msm),
        "a paused object is not taken up"
    );

    // Unpaused: taken up before anything else is looked at.
    let mut unpaused = rig.api.get(&msm);
    unpaused.metadata.annotations = None;
    rig.api.put(&unpaused);
    once(&rig, &msm).await;
    assert!(has_finalizer(&rig, &msm), "the finalizer first");
    assert_eq!(reason(&rig, &msm, "Ready"), None, "and no status with it");

    // The cluster's infrastructure is awaited before the Machine's bootstrap data.
    once(&rig, &msm).await;
    let infrastructure = Some("WaitingForClusterInfrastructure".to_owned());
    assert_eq!(reason(&rig, &msm, "Ready"), infrastructure);
    assert_eq!(reason(&rig, &msm, "Paused").as_deref(), Some("NotPaused"));
}
