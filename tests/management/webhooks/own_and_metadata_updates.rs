//! Updates the apiserver does not send to capms's webhooks: those that keep the spec, and the
//! manager's own.

use super::*;

/// The apiserver skips both webhooks for an update that leaves the spec alone (their
/// matchConditions), as Cluster API's and capms's metadata writes are.
pub(super) async fn metadata_only_updates_never_reach_the_webhooks(
    a: &Admission<'_>,
    manager: &CapmsManager,
) {
    let before = updates(manager).await;
    for patch in [
        r#"{"metadata":{"labels":{"team":"a"},"finalizers":["example.com/hold"]}}"#,
        r#"{"metadata":{"finalizers":null}}"#,
    ] {
        let out = a.patch_cluster("good", patch);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        updates(manager).await,
        before,
        "metadata-only updates reached the webhooks"
    );
}

/// The manager's own updates (finalizers, `spec.providerID`) are not sent to its webhooks: the
/// apiserver leaves out every update by the user the configurations name as the manager, while
/// the same update by a person is still refused.
pub(super) async fn the_managers_own_updates_never_reach_the_webhooks(
    a: &Admission<'_>,
    manager: &CapmsManager,
    manager_kubeconfig: &Path,
) {
    let patch_machine = |kubeconfig: Option<&Path>, machine_type: &str| {
        let patch = json!({"spec": {"machineType": machine_type}}).to_string();
        a.patch_as(kubeconfig, ("metalstackmachine", "good-machine"), &patch)
    };
    let before = updates(manager).await;
    let by_manager = patch_machine(Some(manager_kubeconfig), "no-such-size");
    let stderr = String::from_utf8_lossy(&by_manager.stderr);
    assert!(
        by_manager.status.success(),
        "the manager's update was sent: {stderr}"
    );
    assert_eq!(
        updates(manager).await,
        before,
        "the manager's update reached the webhooks"
    );
    let by_person = patch_machine(None, "no-such-size-either");
    let stderr = String::from_utf8_lossy(&by_person.stderr);
    assert!(
        !by_person.status.success(),
        "a person's update was admitted"
    );
    assert!(
        stderr.contains("spec.machineType: machine type \"no-such-size-either\" is not a metal-stack size; valid: v1-small-x86"),
        "{stderr}"
    );
    let restored = patch_machine(Some(manager_kubeconfig), "v1-small-x86");
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
}

/// How many updates capms's webhooks have been sent.
async fn updates(manager: &CapmsManager) -> f64 {
    metrics_text(manager)
        .await
        .lines()
        .filter(|l| {
            l.starts_with("capms_admission_requests_total{") && l.contains("operation=\"UPDATE\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>()
}
