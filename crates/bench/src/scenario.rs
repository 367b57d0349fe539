//! One benchmark run: everything started, K clusters applied and provisioned, a quiet period,
//! the admission load, then the clusters deleted; measured phase by phase.

use crate::apiserver_load::{ApiserverLoad, ClusterApiAlone};
use crate::audit::{self, ConflictCauses};
use crate::kubelets::Kubelets;
use crate::measure::{ApiserverScrape, Counters, CpuClock, ProcessUsage, Scrape};
use crate::report::{
    ADMISSIONS, Deletion, Idle, KUBE_REQUESTS, Provisioning, Report, Size, TakenUp,
};
use crate::support::{
    CapiManager, CapmsManager, ControlPlane, ManagerOn, Managers, RunningSim, TestNamespace,
    repo_root,
};
use crate::v2_tokens::{TokenRefreshes, V2Credentials, secret_name};
use crate::watch::Timelines;
use crate::{Api, Args, admission};
use kube::ResourceExt;
use metal_api::types::event;
use metal_sim::inventory::{Inventory, MachineSpec};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Cluster networks the default inventory's private super network (a /16 cut into /22s) holds.
pub const MAX_CLUSTERS: usize = 64;

/// The simulator's default inventory with exactly `count` machines of its one size, spread over
/// four racks.
fn inventory(count: usize) -> Inventory {
    let mut inventory = Inventory::default_lab();
    let template = inventory.machines[0].clone();
    inventory.machines = (0..count)
        .map(|i| MachineSpec {
            id: format!("00000000-0000-0000-0001-{i:012}"),
            rack: format!("rack-{}", i % 4 + 1),
            ..template.clone()
        })
        .collect();
    inventory
}

fn timings(step: Duration) -> metal_sim::Timings {
    metal_sim::Timings {
        installing: step,
        booting: step,
        phoned_home: step,
        ip_release: Duration::from_millis(200),
        reclaim: Duration::from_millis(200),
    }
}

/// The name of the run's `i`th cluster (its Cluster and MetalStackCluster).
fn cluster_name(i: usize) -> String {
    format!("bench-{i}")
}

/// The demo's cluster (firewall, MachineDeployment), `clusters` times in `namespace`, with
/// `workers` replicas each; with `workload_api` (a kubeconfig), each cluster's kubeconfig Secret;
/// with `v2`, each cluster's credentials Secret of API v2, named in its spec.credentialsRef.
fn clusters_manifest(
    namespace: &str,
    (clusters, workers): (usize, usize),
    workload_api: Option<&str>,
    v2: Option<&V2Credentials>,
) -> String {
    let demo =
        std::fs::read_to_string(repo_root().join("tests/fixtures/infrastructure/cluster.yaml"))
            .expect("demo cluster manifest");
    let demo = demo
        .replace("namespace: demo", "namespace: NAMESPACE")
        .replace("replicas: 2", &format!("replicas: {workers}"));
    (0..clusters)
        .map(|i| {
            let name = cluster_name(i);
            let mut cluster = demo.replace("demo", &name).replace("NAMESPACE", namespace);
            if let Some(kubeconfig) = workload_api {
                let secret = kubeconfig_secret(namespace, &name, kubeconfig);
                cluster = format!("{cluster}\n---\n{secret}");
            }
            if let Some(v2) = v2 {
                let secret = secret_name(&name);
                let reference =
                    format!("\nspec:\n  credentialsRef:\n    name: {secret}\n  partition:");
                cluster = cluster.replace("\nspec:\n  partition:", &reference);
                let secret = v2.secret(namespace, &secret, i);
                cluster = format!("{cluster}\n---\n{secret}");
            }
            cluster
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// The run's clusters for `namespace` (with `v2`, on metal-apiserver), written to
/// `work/clusters.yaml` (returned).
pub(crate) fn write_clusters(
    args: &Args,
    namespace: &str,
    work: &Path,
    v2: Option<&V2Credentials>,
) -> std::path::PathBuf {
    let kubeconfig = (!args.no_workload_api).then(|| {
        std::fs::read_to_string(&ControlPlane::shared().kubeconfig).expect("read kubeconfig")
    });
    let text = clusters_manifest(
        namespace,
        (args.clusters, args.workers),
        kubeconfig.as_deref(),
        v2,
    );
    let manifest = work.join("clusters.yaml");
    std::fs::write(&manifest, text).expect("write clusters");
    manifest
}

/// Cluster `cluster`'s kubeconfig Secret, as a control-plane provider writes it, holding
/// `kubeconfig`. The benchmark's clusters have no control plane; pointing their kubeconfig at
/// the management cluster's own API server (on this machine) lets Cluster API connect to "the
/// workload cluster" and wait for Nodes there, as it does when workers join a running cluster.
/// Without it, Cluster API fails to connect for every provisioned Machine and retries about once
/// a second, a reconcile error each time.
fn kubeconfig_secret(namespace: &str, cluster: &str, kubeconfig: &str) -> String {
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": {
            "name": format!("{cluster}-kubeconfig"),
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
        },
        "stringData": {"value": kubeconfig},
    });
    serde_json::to_string(&secret).expect("a Secret serializes")
}

/// What runs during the benchmark; stopped when dropped.
struct Stack {
    sim: RunningSim,
    capms: CapmsManager,
    capi: CapiManager,
    ns: TestNamespace,
    /// Logs, certificates and manifests of the run (kept in the output directory).
    work: std::path::PathBuf,
    /// The machines' kubelets registering their Nodes (`--nodes`).
    _kubelets: Option<Kubelets>,
}

/// `name` under the output directory, emptied: a run's logs, certificates and manifests.
pub(crate) fn fresh_work_dir(args: &Args, name: &str) -> std::path::PathBuf {
    let work = args.out.join(name);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("work dir");
    work
}

async fn start(args: &Args) -> Stack {
    capms::tls::install_default_provider();
    let cp = ControlPlane::shared();
    let ns = cp.namespace("bench").await;
    let machines = args.machines.unwrap_or_else(|| args.needed_machines());
    let sim = RunningSim::start_with(
        inventory(machines),
        "/metal",
        timings(args.lifecycle_step()),
    )
    .await;
    let work = fresh_work_dir(args, "work");
    let on = ManagerOn {
        cp,
        namespace: &ns.name,
        work: &work,
    };
    let Managers { capi, capms } =
        Managers::start(&on, &sim.url, &args.capms_args, &args.log).await;
    let kubelets = (args.nodes).then(|| {
        let clusters: Vec<String> = (0..args.clusters).map(cluster_name).collect();
        Kubelets::start(&sim, ns.client.clone(), &ns.name, &clusters)
    });
    Stack {
        sim,
        capms,
        capi,
        ns,
        work,
        _kubelets: kubelets,
    }
}

/// The provider run, compared with `capi_alone` (the baseline) when there is one.
pub async fn run(args: &Args, capi_alone: Option<ClusterApiAlone>) -> Report {
    let stack = start(args).await;
    let scrape = Scrape::new(stack.capms.metrics_port);
    let timelines = Timelines::start(stack.ns.client.clone(), &stack.ns.name);
    let mut cpu = CpuClock::start(stack.capms.process.pid());
    let v2 = match args.api {
        Api::V1 => None,
        Api::V2 => {
            Some(V2Credentials::minted(&stack.sim, args.clusters, args.token_lifetime).await)
        }
    };
    let (mut provisioning, apiserver_until_owned, apiserver) =
        provision_measured(args, &stack, &scrape, &timelines, v2.as_ref()).await;
    cpu.phase("provisioning");
    let idle = idle(args, &stack, &scrape).await;
    cpu.phase("idle");
    let provisioned =
        crate::capi_log::provisioned(&stack.capi.process.log_text(), timelines.origin_wall());
    let seen = timelines.snapshot().taken_up_as(&provisioned);
    let workers = args.clusters * args.workers;
    provisioning.taken_up = TakenUp::of(&seen.resolved(|_| None), workers, &provisioned);
    let admission = admission::run(args, &stack.capms, &stack.sim).await;
    cpu.phase("admission");
    let deletion = delete(args, &stack, &scrape, &timelines).await;
    cpu.phase("deletion");
    let usage = cpu.usage();
    let v2_tokens = match (&v2, args.token_lifetime) {
        (Some(v2), Some(lifetime_seconds)) => {
            let clusters: Vec<String> = (0..args.clusters).map(cluster_name).collect();
            Some(TokenRefreshes {
                lifetime_seconds,
                clusters: args.clusters,
                refreshed: v2
                    .refreshed(&stack.ns.client, &stack.ns.name, &clusters)
                    .await,
            })
        }
        _ => None,
    };
    let conflict_causes = conflict_causes(args, &stack, &timelines, &provisioning);
    let phoned_home = phoned_home(&stack.sim.sim, timelines.origin_wall());
    let csv = timelines
        .snapshot()
        .taken_up_as(&provisioned)
        .resolved(|id| phoned_home.get(id).copied())
        .csv();
    std::fs::write(stack.work.join("timelines.csv"), csv).expect("write timelines.csv");
    Report {
        size: Size::of(args),
        capi_alone,
        apiserver_until_owned,
        apiserver,
        provisioning,
        idle,
        admission,
        deletion,
        capms: usage,
        conflict_causes,
        v2_tokens,
    }
}

/// Which capms write preceded Cluster API's Machine status writes and their conflicts, while
/// the machines were provisioned; None unless the apiserver kept an audit log
/// (`CAPMS_APISERVER_AUDIT=1`, as `make bench` sets it).
fn conflict_causes(
    args: &Args,
    stack: &Stack,
    timelines: &Timelines,
    provisioning: &Provisioning,
) -> Option<ConflictCauses> {
    let origin = timelines.origin_wall();
    let span = jiff::SignedDuration::try_from_secs_f64(provisioning.seconds_to_all_ready).ok()?;
    let machines = timelines.snapshot().machine_names();
    let run = audit::Run {
        namespace: &stack.ns.name,
        capms_user: &format!("capms-{}", stack.ns.name),
        machines: &machines,
        span: (origin, origin.checked_add(span).ok()?),
        workers: args.clusters * args.workers,
    };
    let log = ControlPlane::shared().dir.join("audit.log");
    // Kept with the run's other files, for looking into it beyond the split.
    let _ = std::fs::copy(&log, stack.work.join("audit.log"));
    audit::analyse(&log, &run)
}

/// The kube-apiserver's counters, its CPU seconds and capms's counters at one moment.
type Moment = (Counters, f64, Counters);

/// Provisioning, with what it cost the kube-apiserver until Cluster API owned the last
/// MetalStackMachine (the baseline's span) and until everything was ready.
async fn provision_measured(
    args: &Args,
    stack: &Stack,
    scrape: &Scrape,
    timelines: &Timelines,
    v2: Option<&V2Credentials>,
) -> (Provisioning, ApiserverLoad, ApiserverLoad) {
    let apiserver = ApiserverScrape::new(stack.ns.client.clone());
    let pid = ControlPlane::shared().apiserver_pid();
    let moment = || async {
        let counters = apiserver.counters().await;
        (
            counters,
            ProcessUsage::of(pid).cpu_seconds,
            scrape.counters().await,
        )
    };
    let before: Moment = moment().await;
    let workers = args.clusters * args.workers;
    let load = |at: &Moment| {
        let capms = at.2.minus(&before.2);
        ApiserverLoad::new(
            (args.needed_machines(), workers),
            at.1 - before.1,
            &at.0.minus(&before.0),
            (capms.total(KUBE_REQUESTS), capms.total(ADMISSIONS)),
        )
    };
    let owned = async {
        let all_owned = |s: &crate::watch::Seen| s.owned_machines() >= workers;
        timelines
            .wait("every MetalStackMachine owned", timeout(args), all_owned)
            .await;
        moment().await
    };
    let (provisioning, at_owned) =
        tokio::join!(provision(args, stack, scrape, timelines, v2), owned);
    let at_ready = moment().await;
    (provisioning, load(&at_owned), load(&at_ready))
}

pub(crate) fn timeout(args: &Args) -> Duration {
    Duration::from_secs(args.timeout)
}

async fn provision(
    args: &Args,
    stack: &Stack,
    scrape: &Scrape,
    timelines: &Timelines,
    v2: Option<&V2Credentials>,
) -> Provisioning {
    let manifest = write_clusters(args, &stack.ns.name, &stack.work, v2);
    stack.sim.sim.stats().reset();
    let before = scrape.counters().await;
    let started = Instant::now();
    timelines.set_origin(started);
    apply(&manifest);
    let (workers, firewalls) = (args.clusters * args.workers, args.clusters);
    timelines
        .wait("every machine and firewall ready", timeout(args), |s| {
            s.ready_machines() >= workers && s.ready_firewalls() >= firewalls
        })
        .await;
    let elapsed = started.elapsed();
    let counters = scrape.counters().await.minus(&before);
    let metal = stack.sim.sim.stats().report();
    let orphans = orphans(stack).await;
    let phoned_home = phoned_home(&stack.sim.sim, timelines.origin_wall());
    let mut provisioning = Provisioning::new(
        args,
        elapsed,
        &timelines
            .snapshot()
            .resolved(|id| phoned_home.get(id).copied()),
        &metal,
        &counters,
        3 * args.lifecycle_step(),
    );
    provisioning.orphans_left_by_cluster_api = orphans;
    provisioning
}

/// When each machine last phoned home, in seconds since `origin`, by machine id: the
/// simulator's own record of the lifecycle's end.
fn phoned_home(sim: &metal_sim::Sim, origin: jiff::Timestamp) -> BTreeMap<String, f64> {
    let state = sim.state();
    let phoned = state.machines.values().filter_map(|m| {
        let newest = m.events.iter().find(|e| e.event == event::PHONED_HOME)?;
        let since = newest.time.duration_since(origin).as_secs_f64();
        Some((m.id.clone(), since))
    });
    phoned.collect()
}

async fn idle(args: &Args, stack: &Stack, scrape: &Scrape) -> Idle {
    stack.sim.sim.stats().reset();
    let before = scrape.counters().await;
    let window = Duration::from_secs(args.idle);
    tokio::time::sleep(window).await;
    let counters = scrape.counters().await.minus(&before);
    Idle::new(window, &stack.sim.sim.stats().report(), &counters)
}

async fn delete(args: &Args, stack: &Stack, scrape: &Scrape, timelines: &Timelines) -> Deletion {
    stack.sim.sim.stats().reset();
    let before = scrape.counters().await;
    let started = Instant::now();
    ControlPlane::shared().kubectl(
        &[
            "delete",
            "clusters.cluster.x-k8s.io",
            "--all",
            "-n",
            &stack.ns.name,
            "--wait=false",
        ],
        &[],
    );
    timelines
        .wait("every machine and firewall gone", timeout(args), |s| {
            s.present() == 0
        })
        .await;
    let sim = stack.sim.sim.clone();
    crate::support::eventually("metal-api to hold no allocation", timeout(args), || {
        let sim = sim.clone();
        async move {
            let state = sim.state();
            let networks = state
                .networks
                .values()
                .filter(|n| n.parentnetworkid.is_some());
            (state.machines.values().all(|m| m.allocation.is_none()) && networks.count() == 0)
                .then_some(())
        }
    })
    .await;
    let elapsed = started.elapsed();
    let counters = scrape.counters().await.minus(&before);
    Deletion::new(args, elapsed, &stack.sim.sim.stats().report(), &counters)
}

/// MetalStackMachines without a Machine once every worker is ready. capms must have written
/// nothing to any of them: a write racing Cluster API's own is what orphans them (a correctness
/// check, not a speed one). Ones capms never touched are Cluster API's leftovers (a Machine it
/// failed to create under load); they are counted and named.
async fn orphans(stack: &Stack) -> usize {
    let api: kube::Api<capms::api::MetalStackMachine> =
        kube::Api::namespaced(stack.ns.client.clone(), &stack.ns.name);
    let all = api
        .list(&Default::default())
        .await
        .expect("list MetalStackMachines");
    let orphans: Vec<_> = all
        .items
        .iter()
        .filter(|m| !m.owner_references().iter().any(|o| o.kind == "Machine"))
        .collect();
    let touched: Vec<String> = orphans
        .iter()
        .filter(|m| m.status.is_some() || !m.finalizers().is_empty())
        .map(|m| m.name_any())
        .collect();
    assert!(
        touched.is_empty(),
        "bench: capms wrote to MetalStackMachines that have no Machine: {touched:?}"
    );
    for m in &orphans {
        let owners: Vec<&str> = m
            .owner_references()
            .iter()
            .map(|o| o.kind.as_str())
            .collect();
        eprintln!(
            "bench: Cluster API left {} without a Machine (owners {owners:?}), untouched by capms",
            m.name_any()
        );
    }
    orphans.len()
}

pub(crate) fn apply(manifest: &Path) {
    ControlPlane::shared().kubectl(&["apply", "-f"], &[manifest.to_path_buf()]);
}

impl Drop for Stack {
    fn drop(&mut self) {
        // The namespace and the processes go with their guards; the logs stay.
        eprintln!("bench: logs in {}", self.work.display());
    }
}
