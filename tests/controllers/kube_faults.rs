//! Kubernetes misbehaving under capms, on a management control plane of the test's own: its
//! kube-apiserver killed and restarted mid-provisioning with etcd compacted while it is down (every watch
//! resumes from a revision that is gone: 410 Gone, then a relist); the leader killed while the
//! provisioning goes on; every write capms makes of its objects answered 409 Conflict for a
//! while, during a scale-down and a scale-up. capms runs as two replicas electing a leader, as
//! the shipped ClusterRole's user, and a replica that exits is started again (a leader that
//! cannot renew its lease exits on purpose). A watcher finds no owner with two machines at any
//! moment, every worker becomes ready, and the deletion frees everything.
//! `CAPMS_KUBE_FAULT_WORKERS` sets the size (3 in `make test`, 40 in `make chaos`); the report
//! goes to stderr and to `CAPMS_KUBE_FAULT_REPORT` when set.

use super::crash_points::{inventory, watch_for_duplicates};
use super::*;
use k8s_openapi::api::coordination::v1::Lease;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Instant;

fn workers() -> usize {
    std::env::var("CAPMS_KUBE_FAULT_WORKERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// Long enough that the leader rides out an apiserver restart on a loaded machine (so its
/// watches, not a fresh process's, meet the 410), short enough for a hand-over in a minute.
const ELECTION: [&str; 4] = [
    "--leader-elect",
    "--leader-elect-lease-duration=60s",
    "--leader-elect-renew-deadline=50s",
    "--leader-elect-retry-period=2s",
];

const LEASE: &str = "capms-controller-leader";

/// How long every write of capms is refused with 409 Conflict.
const CONFLICTS_FOR: Duration = Duration::from_secs(30);

/// Two capms replicas, each started again when it exits, as a Deployment's pods are.
struct Replicas {
    running: [Option<ChildProcess>; 2],
    /// The logs of replicas that exited or were killed.
    gone: String,
    starts: usize,
}

impl Replicas {
    fn start(env: &Env) -> Replicas {
        let mut replicas = Replicas {
            running: [None, None],
            gone: String::new(),
            starts: 0,
        };
        replicas.keep_running(env);
        replicas
    }

    fn keep_running(&mut self, env: &Env) {
        for slot in &mut self.running {
            if let Some(exited) = slot.take_if(|p| !p.is_running()) {
                self.gone.push_str(&exited.log_text());
            }
            if slot.is_none() {
                let name = format!("capms-replica-{}", self.starts);
                // Plain log lines, as the 410 check reads them.
                let plain = [("NO_COLOR", "1")];
                *slot = Some(env.spawn_capms_with_env(&name, &ELECTION, free_port(), &plain));
                self.starts += 1;
            }
        }
    }

    /// SIGKILLs the replica with `pid`, which must be running.
    fn kill(&mut self, pid: u32) {
        let mut killed = None;
        for slot in &mut self.running {
            killed = killed.or_else(|| slot.take_if(|p| p.pid() == pid && p.is_running()));
        }
        let killed = killed.expect("the replica to kill runs");
        self.gone.push_str(&killed.log_text());
    }

    fn logs(&self) -> String {
        let running = self.running.iter().flatten().map(ChildProcess::log_text);
        std::iter::once(self.gone.clone()).chain(running).collect()
    }

    fn tails(&self) -> String {
        let tails = self.running.iter().flatten().map(ChildProcess::log_tail);
        tails.collect::<Vec<_>>().join("\n---\n")
    }
}

/// The lines where a watch of capms's met 410 Gone (and so relisted).
fn gone_watches(logs: &str) -> Vec<String> {
    logs.lines()
        .filter(|l| l.contains("watch failed"))
        // The apiserver's words for 410 Gone on a watch (reason Expired).
        .filter(|l| l.contains("too old resource version") || l.contains(": Expired"))
        .map(str::to_owned)
        .collect()
}

/// The pid of the replica holding the lease.
async fn leader(env: &Env) -> Option<u32> {
    let leases: Api<Lease> = Api::namespaced(env.client(), &env.ns.name);
    let lease = leases.get(LEASE).await.ok()?;
    let holder = lease.spec?.holder_identity?;
    holder.rsplit('-').next()?.parse().ok()
}

/// The shipped ClusterRole, plus what the shipped leader election Role grants.
fn with_leases(mut role: Value) -> Value {
    let text =
        std::fs::read_to_string(repo_root().join("manifests/rbac/leader-election-role.yaml"))
            .expect("leader-election-role.yaml");
    let election: Value = serde_saphyr::from_str(&text).expect("YAML");
    let rules = election["rules"].as_array().expect("rules").clone();
    role["rules"].as_array_mut().expect("rules").extend(rules);
    role
}

struct Run<'a> {
    env: &'a Env,
    replicas: Replicas,
    deadline: Duration,
    report: Vec<String>,
}

impl Run<'_> {
    /// Waits until `goal` holds, keeping two replicas running.
    async fn until<F, Fut>(&mut self, what: &str, goal: F) -> Duration
    where
        F: Fn() -> Fut,
        Fut: Future<Output = bool>,
    {
        let start = Instant::now();
        loop {
            self.replicas.keep_running(self.env);
            if goal().await {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < self.deadline,
                "{what}: not after {:?}; the replicas' logs:\n{}",
                self.deadline,
                self.replicas.tails()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn note(&mut self, line: String) {
        eprintln!("kube faults: {line}");
        self.report.push(line);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restart_expired_watches_hand_over_and_conflicts_lose_nothing() {
    let size = workers();
    let cp = ControlPlane::management("kube-faults");
    let mut env = Env::on(&cp, "kube-faults", inventory(size)).await;
    let user = format!("capms-{}", env.ns.name);
    bind_user(&env, &user, with_leases(shipped_cluster_role(&user, true))).await;
    env.kubeconfig = Some(cp.user_kubeconfig(&user, env.work.path()));
    let conflicts = cp.conflicting_writes(&user);
    let initial = env.metal_state().await;
    let (stop, watcher) = watch_for_duplicates(&env);
    let mut run = Run {
        env: &env,
        replicas: Replicas::start(&env),
        deadline: Duration::from_secs(600 + 10 * size as u64),
        report: vec![format!("{size} workers, two replicas")],
    };

    env.apply_seed_cluster(MSC, lab_cluster()).await;
    env.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh\n"}})).await;
    let names: Vec<String> = (0..size).map(|i| format!("worker-{i}")).collect();
    for name in &names {
        env.add_lab_machine(MSC, name, "bootstrap").await;
    }
    run.until("the firewall and a worker allocated", || async {
        env.allocated_machines().await >= 2
    })
    .await;
    restart_and_hand_over(&mut run, &cp).await;
    run.until("every worker ready", || env.all_ready(&names))
        .await;

    conflicting_scale(&mut run, &conflicts, &names).await;

    env.dynamic("cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .delete(MSC, &DeleteParams::foreground())
        .await
        .expect("delete the Cluster");
    let freed = run
        .until("everything freed", || async {
            let now = env.metal_state().await;
            let freed = now.2.iter().all(|m| m.allocation.is_none());
            now.0.is_empty() && now.1 == initial.1 && freed
        })
        .await;
    run.note(format!("deletion freed everything in {freed:.1?}"));
    stop.store(true, Ordering::SeqCst);
    let looks = watcher
        .await
        .expect("the watcher found no owner with two machines")
        .count;
    let starts = run.replicas.starts;
    run.note(format!(
        "{looks} looks at metal-api found no owner with two machines; {starts} replica starts; duplicates 0, leaks 0"
    ));
    let report = run.report.join("\n") + "\n";
    if let Ok(path) = std::env::var("CAPMS_KUBE_FAULT_REPORT") {
        std::fs::write(&path, report).expect("write the report");
    }
}

/// kube-apiserver killed and restarted with etcd compacted meanwhile: the leader's watches meet 410 Gone
/// and relist. Then the leader is killed while the provisioning goes on, and the standby takes
/// over.
async fn restart_and_hand_over(run: &mut Run<'_>, cp: &ControlPlane) {
    let env = run.env;
    let before = gone_watches(&run.replicas.logs()).len();
    let started = Instant::now();
    tokio::task::block_in_place(|| cp.restart_apiserver(true));
    let down = started.elapsed();
    run.note(format!(
        "kube-apiserver killed and restarted mid-provisioning, etcd compacted while it was down ({down:.1?})"
    ));
    let line = loop {
        run.replicas.keep_running(env);
        if let Some(line) = gone_watches(&run.replicas.logs()).get(before) {
            break line.clone();
        }
        assert!(
            started.elapsed() < run.deadline,
            "no watch of capms met 410 Gone after the restart; the replicas' logs:\n{}",
            run.replicas.tails()
        );
        // sleep-ok: the interval of this deadline-bounded poll of the replicas' logs.
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let seen = started.elapsed();
    run.note(format!(
        "a watch met 410 Gone and relisted, {seen:.1?} after the restart began: {}",
        line.trim()
    ));

    let holder = std::cell::Cell::new(None);
    run.until("a leader", || async {
        holder.set(leader(env).await);
        holder.get().is_some()
    })
    .await;
    let old = holder.get().expect("a leader");
    run.replicas.kill(old);
    let handed = run
        .until("the standby to take the lease over", || async {
            leader(env).await.is_some_and(|pid| pid != old)
        })
        .await;
    run.note(format!(
        "the leader killed (SIGKILL) under load; the standby led {handed:.1?} later"
    ));
}

/// Every write capms makes of its objects refused with 409 Conflict for [`CONFLICTS_FOR`], while
/// a worker is scaled down and another added; afterwards both are done.
async fn conflicting_scale(run: &mut Run<'_>, conflicts: &ConflictingWrites, names: &[String]) {
    let env = run.env;
    conflicts.set(true);
    let gone = names.last().cloned().expect("a worker");
    env.dynamic("cluster.x-k8s.io/v1beta2", "Machine", "machines")
        .delete(&gone, &DeleteParams::default())
        .await
        .expect("scale down");
    env.add_lab_machine(MSC, "worker-added", "bootstrap").await;
    let refusing = Instant::now();
    run.until("writes refused with 409 Conflict", || async {
        refusing.elapsed() >= CONFLICTS_FOR && conflicts.refused() > 0
    })
    .await;
    conflicts.set(false);
    let refused = conflicts.refused();
    let mut kept: Vec<String> = names[..names.len() - 1].to_vec();
    kept.push("worker-added".into());
    let settled = run
        .until("the scale-down and the new worker done", || async {
            let machines: Api<MetalStackMachine> = Api::namespaced(env.client(), &env.ns.name);
            let msm_gone = machines.get_opt(&gone).await.ok().flatten().is_none();
            msm_gone
                && env.allocated_machines().await == kept.len() + 1
                && env.all_ready(&kept).await
        })
        .await;
    run.note(format!(
        "{refused} writes of capms refused with 409 Conflict for {CONFLICTS_FOR:?} during a scale-down and a scale-up; both done {settled:.1?} later"
    ));
}
