//! metal-api misbehaving throughout: a fifth of the calls answered 500, 502 or 503 instead of
//! being carried out; some carried out and their answer lost (a 502), some carried out and held
//! past the client's timeout; new connections closed before a request is read; latency spikes of
//! 2 s. capms provisions every worker all the same and frees everything on deletion, and a
//! watcher finds no owner with two machines at any moment. The faults did strike: each struck
//! about as often as it was set to (the simulator counts them), and each struck at all where
//! enough calls make that certain. capms's backoff keeps its calls bounded (see [`most_calls`]
//! and [`PEAK_CALLS_PER_SECOND`]). `CAPMS_FAULT_WORKERS` sets the size (3 in
//! `make test`, 200 in `make chaos`); the report goes to stderr and to `CAPMS_FAULT_REPORT` when
//! set.

use super::crash_points::{Looks, inventory, watch_for_duplicates};
use super::*;
use std::sync::atomic::Ordering;

fn workers() -> usize {
    std::env::var("CAPMS_FAULT_WORKERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// The faults, as the issue that asked for them sizes them.
fn faults() -> metal_sim::state::Faults {
    metal_sim::state::Faults {
        error_rate: 0.2,
        error_codes: vec![500, 502, 503],
        lost_answer_rate: 0.03,
        timeout_rate: 0.05,
        drop_rate: 0.05,
        spike_rate: 0.05,
        spike_ms: Some(2000),
        ..Default::default()
    }
}

/// The most metal-api calls capms may make for a cluster of `workers` over provisioning and
/// deletion under these faults: 100 and 10 per worker. A run takes about half of it (53 calls
/// for 3 workers, 939 for 200): without faults a worker costs about 2 (an allocation, a free,
/// its share of the cluster's listings) and the cluster a few dozen; every failed call is
/// retried, reads at once with a short backoff, writes on the object's next reconcile after its
/// growing backoff (2 s, 4 s … 30 s). A retry loop without backoff makes thousands.
fn most_calls(workers: usize) -> u64 {
    100 + 10 * workers as u64
}

/// The most calls capms may make over about a second, at any size: its reconciles run 30 at a
/// time, and a reconcile makes at most a few calls, so a rate beyond this is a loop, not load.
const PEAK_CALLS_PER_SECOND: f64 = 150.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_metal_api_faults_every_worker_provisions_and_everything_is_freed() {
    let size = workers();
    let mut env = Env::with_inventory("metal-faults", inventory(size)).await;
    env.start_capms(&[]);
    let initial = env.metal_state().await;
    env.set_faults(json!(faults())).await;
    // Counted from the faults on: capms's start-up calls went before.
    env.sim.sim.stats().reset();
    let (stop, watcher) = watch_for_duplicates(&env);
    let started = std::time::Instant::now();
    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    let names: Vec<String> = (0..size).map(|i| format!("worker-{i}")).collect();
    for name in &names {
        env.add_lab_machine(MSC, name, "bootstrap").await;
    }
    // Every call may take 12 s and fail; retries back off.
    let deadline = Duration::from_secs(600 + 5 * size as u64);
    eventually(
        "every worker ready under metal-api faults",
        deadline,
        || async { env.all_ready(&names).await.then_some(()) },
    )
    .await;

    env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .delete(MSC, &DeleteParams::foreground())
        .await
        .expect("delete the Cluster");
    eventually(
        "everything freed under metal-api faults",
        deadline,
        || async {
            let now = env.metal_state().await;
            let freed = now.2.iter().all(|m| m.allocation.is_none());
            (now.0.is_empty() && now.1 == initial.1 && freed).then_some(())
        },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    let Looks {
        count: looks,
        peak_calls_per_second: peak,
    } = watcher
        .await
        .expect("the watcher found no owner with two machines");
    let elapsed = started.elapsed();
    let report = env.sim.sim.stats().report();
    let failed: u64 = report
        .requests
        .iter()
        .filter(|r| r.status >= 500)
        .map(|r| r.count)
        .sum();
    let calls = report.total;
    let per_worker = calls as f64 / size as f64;
    let most = most_calls(size);
    // The faults struck capms's calls about as often as set (at `make test`'s size only the
    // error fault is certain to strike at all; at `make chaos`'s every fault is), and some did.
    let struck = report.faults.judge(&faults());
    let struck_any = report.faults.struck() > 0;
    let struck = struck.unwrap_or_else(|e| panic!("the faults did not strike as set: {e}"));
    assert!(struck_any, "no fault struck: {struck}");
    let text = format!(
        "metal-api faults with {size} workers: provisioned and freed in {elapsed:.0?}; {calls} metal-api calls ({per_worker:.1} per worker; at most {most}), {failed} answered 5xx; call rate {:.1}/s on average, at most {peak:.0}/s over a second or so (at most {PEAK_CALLS_PER_SECOND}); faults struck: {struck}; {looks} looks found no owner with two machines; duplicates 0, leaks 0\n",
        calls as f64 / elapsed.as_secs_f64(),
    );
    eprintln!("{text}");
    if let Ok(path) = std::env::var("CAPMS_FAULT_REPORT") {
        std::fs::write(&path, &text).expect("write the report");
    }
    assert!(calls <= most, "{text}");
    assert!(peak <= PEAK_CALLS_PER_SECOND, "{text}");
    drop(env.capms.take());
}
