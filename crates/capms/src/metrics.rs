//! The manager's metrics, in one registry the runtime holds (no statics) and hands to the
//! controllers, the metal-api client and the webhooks. Reconciles carry controller-runtime's
//! names (`controller_runtime_reconcile_total{controller,result}`,
//! `controller_runtime_reconcile_errors_total`, `controller_runtime_reconcile_time_seconds`), so
//! the dashboards operators have for Go providers read capms too; capms' own metrics add the
//! error category, metal-api calls and admission.

mod queues;

pub use queues::WorkQueues;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResult {
    controller: String,
    /// `success` or `error`, as controller-runtime labels them.
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileOutcome {
    kind: String,
    /// `success` or the error's category.
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RolloutOutcome {
    /// `started`, `replaced` (the new firewall took over), `superseded` or `failed`.
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OrphanFreed {
    /// `machine`, `firewall`, `ip` or `network`.
    what: String,
}

/// The orphan sweep's looks and what it freed.
#[derive(Debug)]
struct OrphanSweep {
    sweeps: Counter,
    freed: Family<OrphanFreed, Counter>,
}

impl OrphanSweep {
    fn register(r: &mut Registry) -> OrphanSweep {
        OrphanSweep {
            sweeps: register(
                r,
                "capms_orphan_sweeps",
                "Looks of the orphan sweep at the clusters capms manages",
                Counter::default(),
            ),
            freed: register(
                r,
                "capms_orphans_freed",
                "Allocations capms made for an object that went without freeing them, freed by the orphan sweep: machine, firewall, ip, network",
                Family::default(),
            ),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MetalCall {
    endpoint: String,
    /// The HTTP status; 0 when no answer came.
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Admission {
    kind: String,
    step: String,
    operation: String,
    result: String,
}

/// A request to the Kubernetes API, labelled as client-go labels `rest_client_requests_total`
/// (code, host, method) plus the resource it addressed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KubeRequest {
    /// The HTTP status; `<error>` when no answer came, as client-go writes it.
    code: String,
    host: String,
    method: String,
    /// The resource's plural (`metalstackmachines`, `secrets`, …), with `/status` for status
    /// writes; `-` for discovery and other non-resource paths.
    resource: String,
}

/// A work queue, named after its controller as controller-runtime names them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueName {
    name: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Registers `metric` under `name` and hands it back (the registry keeps a clone).
fn register<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

/// controller-runtime's work-queue buckets: 10 ns to 10^3 s, by factors of ten.
fn work_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1e-8, 10.0, 12,
    ))
}

/// controller-runtime's reconcile buckets (seconds).
fn reconcile_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

fn admission_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
    ])
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerResult, Counter>,
    reconcile_errors: Family<ControllerLabel, Counter>,
    reconcile_time: Histograms<ControllerLabel>,
    outcomes: Family<ReconcileOutcome, Counter>,
    metal_calls: Family<MetalCall, Counter>,
    admissions: Family<Admission, Counter>,
    admission_time: Histograms<Admission>,
    kube_requests: Family<KubeRequest, Counter>,
    rollouts: Family<RolloutOutcome, Counter>,
    orphans: OrphanSweep,
    /// The controllers' work queues as controller-runtime reports them.
    pub queues: WorkQueues,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let r = &mut registry;
        let kube_requests = register(
            r,
            "rest_client_requests",
            "Number of HTTP requests to the Kubernetes API, partitioned by status code, host, method and resource",
            Family::default(),
        );
        let reconciles = register(
            r,
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            Family::default(),
        );
        let reconcile_errors = register(
            r,
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            Family::default(),
        );
        let reconcile_time: Histograms<ControllerLabel> = register(
            r,
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            Family::new_with_constructor(reconcile_histogram),
        );
        let outcomes = register(
            r,
            "capms_reconcile",
            "Reconciles by kind and outcome (success or the error's category)",
            Family::default(),
        );
        let metal_calls = register(
            r,
            "capms_metal_api_requests",
            "metal-api calls by endpoint and HTTP status (0: no answer)",
            Family::default(),
        );
        let admissions = register(
            r,
            "capms_admission_requests",
            "Admission requests by kind, step, operation and result",
            Family::default(),
        );
        let admission_time: Histograms<Admission> = register(
            r,
            "capms_admission_duration_seconds",
            "Admission latency",
            Family::new_with_constructor(admission_histogram),
        );
        let rollouts = register(
            r,
            "capms_firewall_rollouts",
            "Firewall rollouts by outcome: started, replaced, superseded, failed",
            Family::default(),
        );
        let orphans = OrphanSweep::register(r);
        let queues = WorkQueues::register(r);
        Metrics {
            queues,
            rollouts,
            orphans,
            kube_requests,
            registry,
            reconciles,
            reconcile_errors,
            reconcile_time,
            outcomes,
            metal_calls,
            admissions,
            admission_time,
        }
    }

    /// One reconcile of `kind`: `Ok` as `success`, else the error's category.
    pub fn reconcile(&self, kind: &str, outcome: Result<(), &str>, elapsed: Duration) {
        let controller = ControllerLabel {
            controller: kind.to_lowercase(),
        };
        let result = if outcome.is_ok() { "success" } else { "error" };
        self.reconciles
            .get_or_create(&ControllerResult {
                controller: controller.controller.clone(),
                result: result.into(),
            })
            .inc();
        if outcome.is_err() {
            self.reconcile_errors.get_or_create(&controller).inc();
        }
        self.reconcile_time
            .get_or_create(&controller)
            .observe(elapsed.as_secs_f64());
        self.queues.worked(&controller.controller, elapsed);
        self.outcomes
            .get_or_create(&ReconcileOutcome {
                kind: kind.into(),
                outcome: outcome.err().unwrap_or("success").into(),
            })
            .inc();
    }

    /// A firewall rollout step: `started`, `replaced`, `superseded` or `failed`.
    pub fn rollout(&self, outcome: &str) {
        self.rollouts
            .get_or_create(&RolloutOutcome {
                outcome: outcome.into(),
            })
            .inc();
    }

    /// The orphan sweep looked at the clusters capms manages.
    pub(crate) fn orphan_sweep(&self) {
        self.orphans.sweeps.inc();
    }

    /// The orphan sweep freed a `what` (machine, firewall, ip, network).
    pub(crate) fn orphan_freed(&self, what: &str) {
        self.orphans
            .freed
            .get_or_create(&OrphanFreed { what: what.into() })
            .inc();
    }

    /// A failed reconcile of `kind` that is tried again.
    pub fn retry(&self, kind: &str) {
        self.queues.retried(kind);
    }

    /// One request to the Kubernetes API (`code` None: no answer).
    pub(crate) fn kube_request(&self, host: &str, method: &str, resource: &str, code: Option<u16>) {
        self.kube_requests
            .get_or_create(&KubeRequest {
                code: code.map_or_else(|| "<error>".to_owned(), |c| c.to_string()),
                host: host.into(),
                method: method.into(),
                resource: resource.into(),
            })
            .inc();
    }

    /// One admission request by kind, step (mutate/validate), operation and result.
    pub fn admission(
        &self,
        kind: &str,
        step: &str,
        operation: &str,
        result: &str,
        elapsed: Duration,
    ) {
        let labels = Admission {
            kind: kind.into(),
            step: step.into(),
            operation: operation.into(),
            result: result.into(),
        };
        self.admissions.get_or_create(&labels).inc();
        self.admission_time
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// The registry in OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }
}

/// One metal-api call by endpoint and HTTP status (0: no answer).
impl metal_api::CallObserver for Metrics {
    fn observe(&self, endpoint: &str, status: u16) {
        self.metal_calls
            .get_or_create(&MetalCall {
                endpoint: endpoint.into(),
                status: status.to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_are_counted_under_controller_runtime_names() {
        let m = Metrics::new();
        m.reconcile("MetalStackMachine", Ok(()), Duration::from_millis(20));
        m.reconcile(
            "MetalStackMachine",
            Err("metal_unreachable"),
            Duration::from_millis(5),
        );
        m.retry("MetalStackMachine");
        metal_api::CallObserver::observe(&m, "machine_get", 200);
        m.admission(
            "MetalStackMachine",
            "validate",
            "CREATE",
            "denied",
            Duration::from_micros(300),
        );
        let text = m.render();
        for expected in [
            "controller_runtime_reconcile_total{controller=\"metalstackmachine\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"metalstackmachine\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"metalstackmachine\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"metalstackmachine\"} 2",
            "capms_reconcile_total{kind=\"MetalStackMachine\",outcome=\"metal_unreachable\"} 1",
            "workqueue_work_duration_seconds_count{name=\"metalstackmachine\"} 2",
            "workqueue_retries_total{name=\"metalstackmachine\"} 1",
            "capms_metal_api_requests_total{endpoint=\"machine_get\",status=\"200\"} 1",
            "capms_admission_requests_total{kind=\"MetalStackMachine\",step=\"validate\",operation=\"CREATE\",result=\"denied\"} 1",
            "capms_admission_duration_seconds_bucket{le=\"0.0005\",kind=\"MetalStackMachine\"",
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
    }
}
