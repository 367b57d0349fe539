//! The benchmark's report: JSON for machines, a short table for people, and the
//! ready-over-time curve as SVG.

use crate::Args;
use crate::apiserver_load::{ApiserverLoad, ClusterApiAlone};
use crate::audit::ConflictCauses;
use crate::measure::{Counters, ProcessUsage};
use crate::watch::Seen;
use metal_sim::stats::StatsReport;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

pub(crate) const KUBE_REQUESTS: &str = "rest_client_requests_total";
const RECONCILES: &str = "controller_runtime_reconcile_total";
pub(crate) const ADMISSIONS: &str = "capms_admission_requests_total";

#[derive(Serialize)]
pub struct Size {
    pub clusters: usize,
    pub workers_per_cluster: usize,
    /// Workers plus one firewall per cluster: what "per machine" divides by.
    pub machines: usize,
    pub lifecycle_step_seconds: f64,
    pub capms_args: Vec<String>,
    /// Whether the clusters' kubeconfig Secrets point at an API server Cluster API can reach.
    pub workload_api: bool,
    /// Whether each machine's Node was registered there once it phoned home (`--nodes`).
    pub nodes: bool,
    /// metal-api (v1) or metal-apiserver (v2, a project token per cluster).
    pub api: crate::Api,
}

impl Size {
    pub fn of(args: &Args) -> Size {
        Size {
            clusters: args.clusters,
            workers_per_cluster: args.workers,
            machines: args.needed_machines(),
            lifecycle_step_seconds: args.step,
            capms_args: args.capms_args.clone(),
            workload_api: !args.no_workload_api,
            nodes: args.nodes,
            api: args.api,
        }
    }
}

/// p50, p90, p99 and max of a sample, in the unit it was given.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(values: &mut [f64]) -> Percentiles {
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let i = ((values.len() as f64 * q).ceil() as usize).saturating_sub(1);
            values.get(i).copied().unwrap_or(0.0)
        };
        Percentiles {
            count: values.len(),
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: values.last().copied().unwrap_or(0.0),
        }
    }
}

/// Latencies in milliseconds.
pub fn percentiles(latencies: &mut [Duration]) -> Percentiles {
    let mut ms: Vec<f64> = latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    Percentiles::of(&mut ms)
}

/// metal-api calls by `METHOD route` (all statuses), from the simulator's counts.
fn by_route(stats: &StatsReport) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in &stats.requests {
        *out.entry(format!("{} {}", r.method, r.route)).or_insert(0) += r.count;
    }
    out
}

/// Calls answered with HTTP `status`: 429 is metal-apiserver's `resource_exhausted` (over a
/// token's rate limit), 401 its `unauthenticated` (a token expired or revoked).
fn answered(stats: &StatsReport, status: u16) -> u64 {
    let refused = stats.requests.iter().filter(|r| r.status == status);
    refused.map(|r| r.count).sum()
}

fn per(map: BTreeMap<String, f64>, n: usize) -> BTreeMap<String, f64> {
    map.into_iter().map(|(k, v)| (k, v / n as f64)).collect()
}

#[derive(Serialize)]
pub struct Latencies {
    /// Cluster API's part: from the MetalStackMachine's creation to its Machine owning it.
    pub created_to_owned_s: Percentiles,
    /// capms's part: from the owner reference to the allocation.
    pub owned_to_allocated_s: Percentiles,
    /// capms's wait for the MachineSet: from the owner reference until the MachineSet reported
    /// every replica.
    pub owned_to_released_s: Percentiles,
    /// From Cluster API's Machine's creation to its naming bootstrap data.
    pub created_to_bootstrap_s: Percentiles,
    /// capms's allocation: from every gate open (owned, released, bootstrap data named) to the
    /// allocation.
    pub gates_open_to_allocated_s: Percentiles,
    /// The simulated lifecycle: from the allocation to the machine phoning home.
    pub allocated_to_phoned_home_s: Percentiles,
    /// capms noticing: from the machine phoning home to ready.
    pub phoned_home_to_ready_s: Percentiles,
    pub created_to_allocated_s: Percentiles,
    pub allocated_to_ready_s: Percentiles,
    /// capms's whole part: from the owner reference to ready.
    pub owned_to_ready_s: Percentiles,
    pub created_to_ready_s: Percentiles,
}

#[derive(Serialize)]
pub struct Provisioning {
    pub seconds_to_all_ready: f64,
    /// When Cluster API created the last MetalStackMachine, plus the simulator's lifecycle:
    /// no provider can be faster.
    pub lower_bound_seconds: f64,
    pub last_machine_created_seconds: f64,
    pub times_lower_bound: f64,
    /// What Cluster API's own pace allowed: when the last Machine owned its MetalStackMachine
    /// (the contract's signal to start), plus the lifecycle. A provider taking no time of its
    /// own would be done then, so a ratio above this one's is Cluster API's, not capms's.
    pub owned_bound_seconds: f64,
    /// When the last MetalStackMachine's Machine owned it: Cluster API's pace in this run.
    pub last_owned_seconds: f64,
    /// When the last MachineSet reported every replica it wants (NaN if one never did).
    pub machine_sets_reported_seconds: f64,
    pub owned_bound_times_lower_bound: f64,
    /// The p90 creation → ready of that provider: creation → owner reference plus the lifecycle.
    pub owned_bound_created_to_ready_p90_s: f64,
    pub worker_latency: Latencies,
    pub metal_calls_per_machine: f64,
    pub metal_calls: BTreeMap<String, u64>,
    /// Calls answered `resource_exhausted` (API v2's rate limit per token).
    pub metal_calls_rate_limited: u64,
    /// Calls answered `unauthenticated` (API v2: a token expired or revoked).
    pub metal_calls_unauthenticated: u64,
    pub apiserver_requests_per_machine: f64,
    pub apiserver_requests_per_machine_by_method: BTreeMap<String, f64>,
    pub apiserver_requests_by_resource: BTreeMap<String, f64>,
    pub reconciles: BTreeMap<String, f64>,
    /// Reconciles by outcome: success, or the error's category (`kube_conflict`: a write
    /// guarded by the object's version, refused as the copy was older).
    pub reconcile_outcomes: BTreeMap<String, f64>,
    pub reconciles_per_worker: f64,
    pub reconciles_per_cluster: f64,
    /// Objects the watches put into each controller's work queue (merged while waiting).
    pub queue_adds: BTreeMap<String, f64>,
    /// How long an object waited in its controller's queue before its reconcile, on average.
    pub queue_wait_mean_s: BTreeMap<String, f64>,
    pub admission_calls: f64,
    /// MetalStackMachines without a Machine that capms never wrote to (Cluster API's).
    pub orphans_left_by_cluster_api: usize,
    /// When Cluster API had taken the workers up, as seen at the end of the idle phase.
    pub taken_up: TakenUp,
    /// (seconds, MetalStackMachines ready) at each readiness.
    pub ready_curve: Vec<(f64, usize)>,
    /// (seconds, MetalStackMachines created) at each creation.
    pub created_curve: Vec<(f64, usize)>,
}

fn curve(mut times: Vec<f64>) -> Vec<(f64, usize)> {
    times.sort_by(f64::total_cmp);
    times
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, i + 1))
        .collect()
}

impl Provisioning {
    pub fn new(
        args: &Args,
        elapsed: Duration,
        seen: &Seen,
        metal: &StatsReport,
        capms: &Counters,
        lifecycle: Duration,
    ) -> Provisioning {
        let workers: Vec<_> = seen.machines.values().collect();
        let created: Vec<f64> = workers.iter().map(|t| t.created).collect();
        let last_created = created.iter().copied().fold(0.0, f64::max);
        let lower_bound = last_created + lifecycle.as_secs_f64();
        let span = |from: fn(&crate::watch::Timeline) -> Option<f64>,
                    to: fn(&crate::watch::Timeline) -> Option<f64>| {
            let mut v: Vec<f64> = workers
                .iter()
                .filter_map(|t| Some(to(t)? - from(t)?))
                .collect();
            Percentiles::of(&mut v)
        };
        let worker_latency = Latencies {
            created_to_owned_s: span(|t| Some(t.created), |t| t.owned),
            owned_to_allocated_s: span(|t| t.owned, |t| t.allocated),
            owned_to_released_s: span(|t| t.owned, |t| t.released),
            created_to_bootstrap_s: span(|t| Some(t.created), |t| t.bootstrap),
            gates_open_to_allocated_s: span(crate::watch::Timeline::gates_open, |t| t.allocated),
            allocated_to_phoned_home_s: span(|t| t.allocated, |t| t.phoned_home),
            phoned_home_to_ready_s: span(|t| t.phoned_home, |t| t.ready),
            created_to_allocated_s: span(|t| Some(t.created), |t| t.allocated),
            allocated_to_ready_s: span(|t| t.allocated, |t| t.ready),
            owned_to_ready_s: span(|t| t.owned, |t| t.ready),
            created_to_ready_s: span(|t| Some(t.created), |t| t.ready),
        };
        let last_owned = workers.iter().filter_map(|t| t.owned).fold(0.0, f64::max);
        let owned_bound = last_owned + lifecycle.as_secs_f64();
        let machines = args.needed_machines();
        let reconciles = capms.by(RECONCILES, "controller");
        let of = |c: &str| reconciles.get(c).copied().unwrap_or(0.0);
        Provisioning {
            seconds_to_all_ready: elapsed.as_secs_f64(),
            lower_bound_seconds: lower_bound,
            last_machine_created_seconds: last_created,
            times_lower_bound: elapsed.as_secs_f64() / lower_bound.max(0.001),
            owned_bound_seconds: owned_bound,
            last_owned_seconds: last_owned,
            machine_sets_reported_seconds: seen.machine_sets_reported().unwrap_or(f64::NAN),
            owned_bound_times_lower_bound: owned_bound / lower_bound.max(0.001),
            // A constant added to every sample adds the same to its p90.
            owned_bound_created_to_ready_p90_s: worker_latency.created_to_owned_s.p90
                + lifecycle.as_secs_f64(),
            worker_latency,
            metal_calls_per_machine: metal.total as f64 / machines as f64,
            metal_calls: by_route(metal),
            metal_calls_rate_limited: answered(metal, 429),
            metal_calls_unauthenticated: answered(metal, 401),
            apiserver_requests_per_machine: capms.total(KUBE_REQUESTS) / machines as f64,
            apiserver_requests_per_machine_by_method: per(
                capms.by(KUBE_REQUESTS, "method"),
                machines,
            ),
            apiserver_requests_by_resource: capms.by(KUBE_REQUESTS, "resource"),
            reconciles_per_worker: of("metalstackmachine") / (args.clusters * args.workers) as f64,
            reconciles_per_cluster: of("metalstackcluster") / args.clusters as f64,
            reconciles,
            reconcile_outcomes: capms.by("capms_reconcile_total", "outcome"),
            queue_adds: capms.by("workqueue_adds_total", "name"),
            queue_wait_mean_s: mean_queue_wait(capms),
            admission_calls: capms.total(ADMISSIONS),
            orphans_left_by_cluster_api: 0,
            taken_up: TakenUp::default(),
            ready_curve: curve(workers.iter().filter_map(|t| t.ready).collect()),
            created_curve: curve(created),
        }
    }
}

/// Ready as Cluster API sees it: each worker's Machine having copied its spec.providerID, which
/// capms reports first. capms's all ready says when it reported the last one; this says when
/// Cluster API had taken them all up.
#[derive(Serialize, Default)]
pub struct TakenUp {
    /// Workers (still there) whose Machine Cluster API had logged provisioned by the end of the
    /// idle phase.
    pub count: usize,
    /// When the last of them was; NaN unless every worker was.
    pub last_seconds: f64,
    pub ready_to_taken_up_s: Percentiles,
    /// Cluster API's completion lines per Machine it logged provisioned: more than one when it
    /// reconciled a Machine again from a cache without its own write.
    pub completions_per_machine: f64,
}

impl TakenUp {
    /// From `seen` resolved with Cluster API's log (`provisioned`, by Machine name).
    pub fn of(
        seen: &Seen,
        workers: usize,
        provisioned: &BTreeMap<String, crate::capi_log::Provisioned>,
    ) -> TakenUp {
        let present: Vec<_> = seen
            .machines
            .values()
            .filter(|t| t.gone.is_none())
            .collect();
        let taken: Vec<f64> = present.iter().filter_map(|t| t.taken_up).collect();
        let mut spans: Vec<f64> = present
            .iter()
            .filter_map(|t| Some(t.taken_up? - t.ready?))
            .collect();
        TakenUp {
            count: taken.len(),
            last_seconds: if taken.len() >= workers {
                taken.iter().copied().fold(0.0, f64::max)
            } else {
                f64::NAN
            },
            ready_to_taken_up_s: Percentiles::of(&mut spans),
            completions_per_machine: provisioned.values().map(|p| p.lines).sum::<usize>() as f64
                / provisioned.len().max(1) as f64,
        }
    }
}

fn mean_queue_wait(capms: &Counters) -> BTreeMap<String, f64> {
    let waited = capms.by("workqueue_queue_duration_seconds_sum", "name");
    let counts = capms.by("workqueue_queue_duration_seconds_count", "name");
    waited
        .into_iter()
        .map(|(queue, sum)| {
            let n = counts.get(&queue).copied().unwrap_or(0.0);
            (queue, if n > 0.0 { sum / n } else { 0.0 })
        })
        .collect()
}

#[derive(Serialize)]
pub struct Idle {
    pub seconds: f64,
    pub metal_calls_per_second: f64,
    pub metal_calls: BTreeMap<String, u64>,
    pub apiserver_requests_per_second: f64,
    pub reconciles: BTreeMap<String, f64>,
}

impl Idle {
    pub fn new(window: Duration, metal: &StatsReport, capms: &Counters) -> Idle {
        let s = window.as_secs_f64();
        Idle {
            seconds: s,
            metal_calls_per_second: metal.total as f64 / s,
            metal_calls: by_route(metal),
            // Watches are long requests, counted when they end; the rest are what idling costs.
            // (+ 0.0: no "-0" when nothing was counted.)
            apiserver_requests_per_second: capms.total(KUBE_REQUESTS) / s + 0.0,
            reconciles: capms.by(RECONCILES, "controller"),
        }
    }
}

#[derive(Serialize)]
pub struct Deletion {
    pub seconds: f64,
    pub metal_calls_per_machine: f64,
    pub metal_calls: BTreeMap<String, u64>,
    /// Calls answered `resource_exhausted` (API v2's rate limit per token).
    pub metal_calls_rate_limited: u64,
    /// Calls answered `unauthenticated` (API v2: a token expired or revoked).
    pub metal_calls_unauthenticated: u64,
    pub apiserver_requests_per_machine: f64,
}

impl Deletion {
    pub fn new(args: &Args, elapsed: Duration, metal: &StatsReport, capms: &Counters) -> Deletion {
        let machines = args.needed_machines() as f64;
        Deletion {
            seconds: elapsed.as_secs_f64(),
            metal_calls_per_machine: metal.total as f64 / machines,
            metal_calls: by_route(metal),
            metal_calls_rate_limited: answered(metal, 429),
            metal_calls_unauthenticated: answered(metal, 401),
            apiserver_requests_per_machine: capms.total(KUBE_REQUESTS) / machines,
        }
    }
}

#[derive(Serialize)]
pub struct Admission {
    pub rate: u32,
    pub seconds: f64,
    pub requests: u64,
    pub achieved_rate: f64,
    pub errors: u64,
    pub latency_ms: Percentiles,
    pub metal_calls: u64,
}

#[derive(Serialize)]
pub struct Report {
    pub size: Size,
    /// The baseline, unless the run was told to skip it.
    pub capi_alone: Option<ClusterApiAlone>,
    /// What provisioning cost the kube-apiserver shared with Cluster API until Cluster API owned
    /// the last MetalStackMachine: the baseline's span.
    pub apiserver_until_owned: ApiserverLoad,
    /// The same until everything was ready.
    pub apiserver: ApiserverLoad,
    pub provisioning: Provisioning,
    pub idle: Idle,
    pub admission: Admission,
    pub deletion: Deletion,
    pub capms: ProcessUsage,
    /// Cluster API's Machine status writes and conflicts by the capms write before them, when
    /// the apiserver kept an audit log.
    pub conflict_causes: Option<ConflictCauses>,
    /// With `--token-lifetime`: how many clusters' Secrets held a token other than the one
    /// minted for them once the clusters were deleted (capms refreshed it).
    pub v2_tokens: Option<crate::v2_tokens::TokenRefreshes>,
}

impl Report {
    /// Cluster API's pace with capms ÷ its pace alone (when the last MetalStackMachine was
    /// owned); NaN without a baseline.
    pub fn pace_times_alone(&self) -> f64 {
        match &self.capi_alone {
            Some(alone) => {
                self.provisioning.last_owned_seconds / alone.last_owned_seconds.max(0.001)
            }
            None => f64::NAN,
        }
    }

    /// Time to all ready ÷ (Cluster API's pace alone + the simulated lifecycle); NaN without a
    /// baseline.
    pub fn all_ready_times_alone_bound(&self) -> f64 {
        let p = &self.provisioning;
        match &self.capi_alone {
            Some(alone) => p.seconds_to_all_ready / (alone.last_owned_seconds + self.lifecycle()),
            None => f64::NAN,
        }
    }

    /// Cluster API's Machine status conflicts per worker to all ready, less those of its run
    /// alone (which ends once every MetalStackMachine is owned); NaN without a baseline.
    pub fn conflicts_over_alone(&self) -> f64 {
        match &self.capi_alone {
            Some(alone) => {
                self.apiserver.machine_status_conflicts_per_worker
                    - alone.apiserver.machine_status_conflicts_per_worker
            }
            None => f64::NAN,
        }
    }

    /// A worker's allocated → ready at p90, less the simulated lifecycle.
    pub fn allocated_to_ready_beyond_lifecycle(&self) -> f64 {
        let latency = &self.provisioning.worker_latency;
        latency.allocated_to_ready_s.p90 - self.lifecycle()
    }

    /// The simulated lifecycle of a machine: its phases' steps, as the lower bound counts them.
    pub(crate) fn lifecycle(&self) -> f64 {
        let p = &self.provisioning;
        p.lower_bound_seconds - p.last_machine_created_seconds
    }
}

/// The ready-over-time curve, the created curve and the lower bound, as a small SVG.
fn svg(p: &Provisioning) -> String {
    let (w, h, m) = (640.0, 360.0, 40.0);
    let t_max = p.seconds_to_all_ready.max(p.lower_bound_seconds).max(1.0);
    let n_max = p.created_curve.len().max(1) as f64;
    let x = |t: f64| m + t / t_max * (w - 2.0 * m);
    let y = |n: f64| h - m - n / n_max * (h - 2.0 * m);
    let line = |points: &[(f64, usize)], color: &str| {
        let mut d = format!("{:.1},{:.1}", x(0.0), y(0.0));
        for (t, n) in points {
            let _ = write!(d, " {:.1},{:.1}", x(*t), y(*n as f64));
        }
        format!(r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{d}"/>"#)
    };
    let bound = x(p.lower_bound_seconds);
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<line x1="{m}" y1="{b}" x2="{r}" y2="{b}" stroke="black"/><line x1="{m}" y1="{m}" x2="{m}" y2="{b}" stroke="black"/>
<text x="{m}" y="{ty}">0</text><text x="{r}" y="{ty}" text-anchor="end">{t_max:.0} s</text>
<text x="4" y="{m}">{n_max:.0}</text>
{created}
{ready}
<line x1="{bound:.1}" y1="{m}" x2="{bound:.1}" y2="{b}" stroke="gray" stroke-dasharray="4"/>
<text x="{bound:.1}" y="{lt}" fill="gray">lower bound {lb:.1} s</text>
<text x="{m}" y="20">MetalStackMachines created (blue) and ready (green) over time</text>
</svg>
"##,
        b = h - m,
        r = w - m,
        ty = h - m + 16.0,
        lt = m - 4.0,
        lb = p.lower_bound_seconds,
        created = line(&p.created_curve, "#1f77b4"),
        ready = line(&p.ready_curve, "#2ca02c"),
    )
}

/// Writes `report.json` (the report with its judged targets, `judged`), `report.txt` and the
/// ready-over-time curve.
pub fn write(report: &Report, judged: &impl Serialize, dir: &Path, table: &str) {
    let json = serde_json::to_string_pretty(judged).expect("report is JSON");
    std::fs::write(dir.join("report.json"), json).expect("write report.json");
    std::fs::write(dir.join("report.txt"), table).expect("write report.txt");
    std::fs::write(dir.join("ready.svg"), svg(&report.provisioning)).expect("write ready.svg");
}
