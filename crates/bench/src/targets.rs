//! The targets capms is held to, checked against one run: each with its limit, what the run
//! measured and whether it met it. A target stated for one size (200 workers, 1,000 workers) or
//! rate (500 AdmissionReviews per second) is not judged at another, as fixed costs (a cluster's
//! network, IP and firewall) or load change what the number means there.

use crate::report::Report;
use serde::Serialize;
use std::fmt::Write;

/// How a measured value must compare with the limit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    AtMost,
    Below,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Met,
    Missed,
    /// The run's size or rate is not the one the target is stated for.
    NotJudged,
}

/// A target as judged in one run: its spec (what, bound, limit, unit, the runs it is stated
/// for), the run's value and the verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    #[serde(flatten)]
    pub spec: &'static Spec,
    pub measured: f64,
    pub verdict: Verdict,
}

/// Which runs a target is judged in.
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    Every,
    /// 200 workers with 1 s lifecycle steps: the run the provisioning targets are stated for.
    Reference,
    /// 200 workers or more: below, a cluster's own calls (network, IP, firewall) weigh on each
    /// of its few machines.
    AtLeast200,
    /// 1,000 workers: the size the memory and CPU targets are stated for.
    Thousand,
    /// Up to 200 workers. Above, Cluster API's MachineSets keep creating and deleting a few
    /// surplus Machines after all are ready, and capms allocates and frees for them: not idling.
    UpTo200,
    /// 500 AdmissionReviews per second or more, for a minute or longer.
    FullRate,
    /// 5 clusters × 40 workers or 10 × 100, 1 s lifecycle steps, with the baseline: the runs
    /// the shared-apiserver targets are stated for.
    SharedApiserver,
    /// Clusters on metal-apiserver (API v2), a project token each.
    ApiV2,
    /// Clusters on API v2 whose tokens live shorter than the run (`--token-lifetime`).
    ShortTokens,
}

impl Scope {
    fn describe(self) -> &'static str {
        match self {
            Scope::Every => "every run",
            Scope::Reference => "200 workers, 1 s lifecycle steps",
            Scope::AtLeast200 => "200 workers or more",
            Scope::Thousand => "1,000 workers",
            Scope::UpTo200 => "up to 200 workers",
            Scope::FullRate => "500 AdmissionReviews/s or more for 60 s or longer",
            Scope::SharedApiserver => "5 × 40 and 10 × 100 workers, 1 s steps, with the baseline",
            Scope::ApiV2 => "clusters on API v2",
            Scope::ShortTokens => "API v2 tokens living shorter than the run",
        }
    }

    fn covers(self, report: &Report) -> bool {
        let s = &report.size;
        let workers = s.clusters * s.workers_per_cluster;
        match self {
            Scope::Every => true,
            Scope::Reference => workers == 200 && s.lifecycle_step_seconds == 1.0,
            Scope::AtLeast200 => workers >= 200,
            Scope::Thousand => workers == 1000,
            Scope::UpTo200 => workers <= 200,
            Scope::FullRate => report.admission.rate >= 500 && report.admission.seconds >= 60.0,
            Scope::SharedApiserver => {
                matches!((s.clusters, s.workers_per_cluster), (5, 40) | (10, 100))
                    && s.lifecycle_step_seconds == 1.0
                    && report.capi_alone.is_some()
            }
            Scope::ApiV2 => s.api == crate::Api::V2,
            Scope::ShortTokens => report.v2_tokens.is_some(),
        }
    }
}

/// One target: what is measured, its limit, and the runs it is stated for.
#[derive(Debug, Serialize)]
pub struct Spec {
    pub what: &'static str,
    pub bound: Bound,
    pub limit: f64,
    pub unit: &'static str,
    /// Decimals shown: none for counts.
    #[serde(skip)]
    decimals: usize,
    #[serde(rename = "stated_for", serialize_with = "stated_for")]
    scope: Scope,
    #[serde(skip)]
    measure: fn(&Report) -> f64,
}

/// A scope as the runs it is stated for, in words.
fn stated_for<S: serde::Serializer>(scope: &Scope, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(scope.describe())
}

const SPECS: &[Spec] = &[
    Spec {
        what: "Cluster API's pace with capms, times its pace alone",
        bound: Bound::AtMost,
        limit: 1.15,
        unit: "×",
        decimals: 2,
        scope: Scope::SharedApiserver,
        measure: Report::pace_times_alone,
    },
    Spec {
        what: "all ready, times (Cluster API's pace alone + lifecycle)",
        bound: Bound::AtMost,
        limit: 1.5,
        unit: "×",
        decimals: 2,
        scope: Scope::SharedApiserver,
        measure: Report::all_ready_times_alone_bound,
    },
    Spec {
        what: "Cluster API's Machine status conflicts per worker to all ready, over its conflicts alone",
        bound: Bound::AtMost,
        limit: 0.5,
        unit: "",
        decimals: 2,
        scope: Scope::SharedApiserver,
        measure: Report::conflicts_over_alone,
    },
    Spec {
        what: "allocated → ready p90, beyond the lifecycle",
        bound: Bound::AtMost,
        limit: 3.0,
        unit: "s",
        decimals: 1,
        scope: Scope::SharedApiserver,
        measure: Report::allocated_to_ready_beyond_lifecycle,
    },
    Spec {
        what: "capms's apiserver requests per machine to provision, shared apiserver",
        bound: Bound::AtMost,
        limit: 8.6,
        unit: "",
        decimals: 2,
        scope: Scope::SharedApiserver,
        measure: |r| r.apiserver.capms_requests_per_machine,
    },
    Spec {
        what: "admission calls per machine to provision",
        bound: Bound::AtMost,
        limit: 1.0,
        unit: "",
        decimals: 2,
        scope: Scope::SharedApiserver,
        measure: |r| r.apiserver.admission_calls_per_machine,
    },
    Spec {
        what: "all ready, times the lower bound",
        bound: Bound::AtMost,
        limit: 1.3,
        unit: "×",
        decimals: 2,
        scope: Scope::Reference,
        measure: |r| r.provisioning.times_lower_bound,
    },
    Spec {
        what: "created → ready p90",
        bound: Bound::Below,
        limit: 10.0,
        unit: "s",
        decimals: 1,
        scope: Scope::Reference,
        measure: |r| r.provisioning.worker_latency.created_to_ready_s.p90,
    },
    Spec {
        what: "metal-api calls per machine to provision",
        bound: Bound::AtMost,
        limit: 4.0,
        unit: "",
        decimals: 2,
        scope: Scope::AtLeast200,
        measure: |r| r.provisioning.metal_calls_per_machine,
    },
    Spec {
        what: "metal-api calls per machine to delete",
        bound: Bound::AtMost,
        limit: 3.0,
        unit: "",
        decimals: 2,
        scope: Scope::AtLeast200,
        measure: |r| r.deletion.metal_calls_per_machine,
    },
    Spec {
        what: "metal-api calls while idle",
        bound: Bound::AtMost,
        limit: 0.1,
        unit: "/s",
        decimals: 3,
        scope: Scope::UpTo200,
        measure: |r| r.idle.metal_calls_per_second,
    },
    Spec {
        what: "apiserver requests per machine to provision",
        bound: Bound::AtMost,
        limit: 10.0,
        unit: "",
        decimals: 2,
        scope: Scope::AtLeast200,
        measure: |r| r.provisioning.apiserver_requests_per_machine,
    },
    Spec {
        what: "admission p99",
        bound: Bound::AtMost,
        limit: 2.0,
        unit: "ms",
        decimals: 2,
        scope: Scope::FullRate,
        measure: |r| r.admission.latency_ms.p99,
    },
    Spec {
        what: "admission errors",
        bound: Bound::AtMost,
        limit: 0.0,
        unit: "",
        decimals: 0,
        scope: Scope::Every,
        measure: |r| r.admission.errors as f64,
    },
    Spec {
        what: "metal-api calls while admitting",
        bound: Bound::AtMost,
        limit: 0.0,
        unit: "",
        decimals: 0,
        scope: Scope::Every,
        measure: |r| r.admission.metal_calls as f64,
    },
    Spec {
        what: "calls metal-apiserver answered resource_exhausted (provisioning and deletion)",
        bound: Bound::AtMost,
        limit: 0.0,
        unit: "",
        decimals: 0,
        scope: Scope::ApiV2,
        measure: |r| {
            (r.provisioning.metal_calls_rate_limited + r.deletion.metal_calls_rate_limited) as f64
        },
    },
    Spec {
        what: "calls metal-apiserver answered unauthenticated (provisioning and deletion)",
        bound: Bound::AtMost,
        limit: 0.0,
        unit: "",
        decimals: 0,
        scope: Scope::ApiV2,
        measure: |r| {
            let (p, d) = (&r.provisioning, &r.deletion);
            (p.metal_calls_unauthenticated + d.metal_calls_unauthenticated) as f64
        },
    },
    Spec {
        what: "clusters whose token capms did not refresh",
        bound: Bound::AtMost,
        limit: 0.0,
        unit: "",
        decimals: 0,
        scope: Scope::ShortTokens,
        measure: |r| match &r.v2_tokens {
            Some(tokens) => (tokens.clusters - tokens.refreshed.min(tokens.clusters)) as f64,
            None => f64::NAN,
        },
    },
    Spec {
        what: "capms peak RSS",
        bound: Bound::AtMost,
        limit: 64.0,
        unit: "MiB",
        decimals: 1,
        scope: Scope::Thousand,
        measure: |r| r.capms.peak_rss_mib,
    },
    Spec {
        what: "capms CPU for the machines (every phase but admission)",
        bound: Bound::AtMost,
        limit: 15.0,
        unit: "s",
        decimals: 1,
        scope: Scope::Thousand,
        measure: |r| {
            let admission = r.capms.cpu_seconds_by_phase.get("admission");
            r.capms.cpu_seconds - admission.copied().unwrap_or(0.0)
        },
    },
];

/// A report with its targets judged: what `report.json` holds.
#[derive(serde::Serialize)]
pub struct Judged<'a> {
    #[serde(flatten)]
    pub report: &'a Report,
    pub targets: Vec<Target>,
}

/// Every target, judged against `report`.
pub fn judge(report: &Report) -> Vec<Target> {
    SPECS
        .iter()
        .map(|spec| {
            let measured = (spec.measure)(report);
            let within = match spec.bound {
                Bound::AtMost => measured <= spec.limit,
                Bound::Below => measured < spec.limit,
            };
            let verdict = match (spec.scope.covers(report), within) {
                (false, _) => Verdict::NotJudged,
                (true, true) => Verdict::Met,
                (true, false) => Verdict::Missed,
            };
            Target {
                spec,
                measured,
                verdict,
            }
        })
        .collect()
}

/// The targets as table lines, the missed ones first.
pub fn write(t: &mut String, targets: &[Target]) {
    let count = |v: Verdict| targets.iter().filter(|t| t.verdict == v).count();
    let _ = writeln!(
        t,
        "  targets                {:>8} met, {} missed, {} not judged at this size or rate",
        count(Verdict::Met),
        count(Verdict::Missed),
        count(Verdict::NotJudged)
    );
    for verdict in [Verdict::Missed, Verdict::Met, Verdict::NotJudged] {
        for target in targets.iter().filter(|t| t.verdict == verdict) {
            let label = match verdict {
                Verdict::Met => "met",
                Verdict::Missed => "MISSED",
                Verdict::NotJudged => "-",
            };
            let spec = target.spec;
            let sign = match spec.bound {
                Bound::AtMost => "≤",
                Bound::Below => "<",
            };
            let _ = writeln!(
                t,
                "    {label:<7}{}: {} {sign} {} ({})",
                spec.what,
                shown(target),
                with_unit(&spec.limit.to_string(), spec.unit),
                spec.scope.describe()
            );
        }
    }
}

/// The measured value, with its unit.
fn shown(target: &Target) -> String {
    let digits = format!("{:.*}", target.spec.decimals, target.measured);
    with_unit(&digits, target.spec.unit)
}

/// Units of measure stand apart from their number; "×" and "/s" follow it directly.
fn with_unit(number: &str, unit: &str) -> String {
    match unit {
        "" => number.to_owned(),
        "×" | "/s" => format!("{number}{unit}"),
        _ => format!("{number} {unit}"),
    }
}

/// The missed targets, one per line, for the run's exit.
pub fn missed(targets: &[Target]) -> Vec<String> {
    targets
        .iter()
        .filter(|t| t.verdict == Verdict::Missed)
        .map(|t| format!("{} was {}", t.spec.what, shown(t)))
        .collect()
}
