//! A second writer beside capms, as an operator's tooling or another controller is: it keeps
//! changing labels and annotations of capms's objects and of Cluster API's (and their status
//! writers keep writing), so that capms's guarded writes meet real conflicts from the apiserver
//! (a finalizer added against a resourceVersion that has moved on). capms retries them; every
//! worker becomes ready with its finalizer and machine, the second writer's last change of every
//! object is still there, and no owner ever has two machines.

use super::crash_points::{inventory, watch_for_duplicates};
use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The second writer's mark: an annotation and a label with the round it wrote last.
const MARK: &str = "second-writer.test.capms.metal-stack.io/round";

/// The objects the second writer changes: capms's and Cluster API's, by API and plural.
fn written(env: &Env) -> Vec<Api<DynamicObject>> {
    let infra = "infrastructure.cluster.x-k8s.io/v1alpha4";
    [
        (infra, "MetalStackCluster", "metalstackclusters"),
        (infra, "MetalStackMachine", "metalstackmachines"),
        (infra, "MetalStackFirewall", "metalstackfirewalls"),
        ("cluster.x-k8s.io/v1beta2", "Machine", "machines"),
        ("cluster.x-k8s.io/v1beta2", "Cluster", "clusters"),
    ]
    .into_iter()
    .map(|(api, kind, plural)| env.dynamic(api, kind, plural))
    .collect()
}

/// Round after round, marks every object of `apis` with the round (a merge patch, as kubectl
/// label and annotate make them) until stopped; the last round each object got, by
/// `Kind/name`. An object without a finalizer yet (capms is about to add its own, guarded by
/// the version it read) is marked in a burst: capms's first try meets a version that has moved
/// on.
type Marks = Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>;

fn second_writer(
    apis: Vec<Api<DynamicObject>>,
    stop: Arc<AtomicBool>,
    marks: Marks,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use futures::StreamExt;
        let mut round = 0u64;
        while !stop.load(Ordering::SeqCst) {
            // Every object, and how many patches it gets this round.
            let mut targets = Vec::new();
            for api in &apis {
                let Ok(list) = api.list(&Default::default()).await else {
                    continue;
                };
                for obj in list.items {
                    let name = obj.metadata.name.clone().unwrap_or_default();
                    let kind = obj.types.as_ref().map(|t| t.kind.clone());
                    let key = format!("{}/{name}", kind.unwrap_or_default());
                    let new = obj.metadata.finalizers.as_ref().is_none_or(Vec::is_empty);
                    targets.push((api.clone(), name, key, if new { 40 } else { 1 }));
                }
            }
            let bursting = targets.iter().any(|t| t.3 > 1);
            // The objects' patches interleaved, eight at a time: every new object's version
            // moves on all through the round.
            let most = targets.iter().map(|t| t.3).max().unwrap_or(0);
            let mut patches = Vec::new();
            for i in 0..most {
                for (api, name, _, count) in &targets {
                    if i < *count {
                        round += 1;
                        patches.push((api.clone(), name.clone(), round));
                    }
                }
            }
            futures::stream::iter(patches)
                .map(|(api, name, r)| async move {
                    let mark = json!({"metadata": {"annotations": {MARK: r.to_string()},
                                                   "labels": {MARK: r.to_string()}}});
                    let _ = api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&mark))
                        .await;
                })
                .buffer_unordered(8)
                .collect::<Vec<()>>()
                .await;
            // The mark each object holds once the writer's patches are in.
            for (api, name, key, _) in &targets {
                let held = api
                    .get(name)
                    .await
                    .ok()
                    .and_then(|o| o.metadata.annotations);
                if let Some(mark) = held.as_ref().and_then(|a| a.get(MARK)) {
                    let mut marks = marks.lock().unwrap_or_else(|p| p.into_inner());
                    marks.insert(key.clone(), mark.parse().unwrap_or_default());
                }
            }
            if !bursting {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    })
}

/// capms's reconciles that ended in a conflict, as its metrics count them.
async fn conflicts(port: u16) -> u64 {
    let text = support::activity::metrics(port)
        .await
        .expect("capms's metrics");
    support::activity::total(&text, "capms_reconcile_total", |labels| {
        labels.contains("kube_conflict")
    })
}

/// The workers first, without their Machines: capms adds its finalizer only once the Machine
/// is there, and by then the second writer is busy marking them.
async fn workers_while_written(env: &Env, names: &[String], marks: &Marks) {
    for name in names {
        env.apply(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "MetalStackMachine",
            "metadata": {"name": name}, "spec": {"image": "ubuntu-26.4", "machineType": "v1-small-x86"}}))
        .await;
    }
    eventually(
        "the second writer marking the workers",
        support::LOADED_MACHINE_WAIT,
        || async {
            let marks = marks.lock().unwrap_or_else(|p| p.into_inner());
            names
                .iter()
                .all(|n| marks.contains_key(&format!("MetalStackMachine/{n}")))
                .then_some(())
        },
    )
    .await;
    for name in names {
        env.add_owning_machine(MSC, name, "bootstrap").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_changing_the_same_objects_loses_nothing_and_duplicates_nothing() {
    let size = 4;
    let mut env = Env::with_inventory("second-writer", inventory(size)).await;
    env.start_capms(&[]);
    let stop = Arc::new(AtomicBool::new(false));
    let marks = Marks::default();
    let writer = second_writer(written(&env), stop.clone(), marks.clone());
    let (stop_looking, watcher) = watch_for_duplicates(&env);
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    let names: Vec<String> = (0..size).map(|i| format!("worker-{i}")).collect();
    workers_while_written(&env, &names, &marks).await;
    eventually(
        "every worker ready beside a second writer",
        support::LOADED_MACHINE_WAIT,
        || async { env.all_ready(&names).await.then_some(()) },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    writer.await.expect("the second writer");
    let last = marks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    stop_looking.store(true, Ordering::SeqCst);
    watcher
        .await
        .expect("the watcher found no owner with two machines");

    // capms met the second writer's changes as conflicts and retried.
    let met = conflicts(env.metrics_port.expect("metrics")).await;
    assert!(met > 0, "capms met no conflict");
    nothing_lost(&env, &last).await;
    // And capms's own writes are all there: a finalizer and a machine for every worker, one
    // machine each.
    let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
    for name in &names {
        let msm = machines.get(name).await.expect("worker");
        assert!(msm.spec.provider_id.is_some(), "{name} named no machine");
        assert!(
            !msm.metadata.finalizers.unwrap_or_default().is_empty(),
            "{name}"
        );
    }
    assert_eq!(
        env.allocated_machines().await,
        size + 1,
        "the workers and the firewall"
    );
    eprintln!(
        "a second writer: capms met {met} conflicts; the writer's last change of {} objects kept",
        last.len()
    );
}

/// The second writer's last change of every object is there.
async fn nothing_lost(env: &Env, last: &std::collections::BTreeMap<String, u64>) {
    for api in written(env) {
        for obj in api.list(&Default::default()).await.expect("list").items {
            let kind = obj
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default();
            let key = format!("{kind}/{}", obj.metadata.name.clone().unwrap_or_default());
            let Some(round) = last.get(&key) else {
                continue;
            };
            let marks = [&obj.metadata.annotations, &obj.metadata.labels];
            for mark in marks.map(|m| m.as_ref().and_then(|m| m.get(MARK))) {
                assert_eq!(
                    mark,
                    Some(&round.to_string()),
                    "{key} lost the second writer's change"
                );
            }
        }
    }
}
