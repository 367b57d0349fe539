//! The benchmark's short table for people: times, Cluster API's pace beside capms, costs,
//! admission and capms's own usage.

use crate::apiserver_load::{ClusterApiAlone, IdealStart};

use crate::report::Report;
use std::collections::BTreeMap;
use std::fmt::Write;

impl Report {
    /// The numbers a person looks at first.
    pub fn table(&self) -> String {
        let mut t = String::new();
        self.write_times(&mut t);
        self.write_shared_apiserver(&mut t);
        self.write_costs(&mut t);
        self.write_admission_and_capms(&mut t);
        t
    }

    /// Size, time to all ready against the lower bound, and the latency percentiles.
    fn write_times(&self, t: &mut String) {
        let (s, p) = (&self.size, &self.provisioning);
        let l = &p.worker_latency;
        let _ = writeln!(
            t,
            "capms bench: {} clusters × {} workers ({} machines with firewalls), {} s lifecycle steps, {}, capms {:?}, {}",
            s.clusters,
            s.workers_per_cluster,
            s.machines,
            s.lifecycle_step_seconds,
            match s.api {
                crate::Api::V1 => "metal-api v1",
                crate::Api::V2 => "metal-apiserver v2 (a token per cluster)",
            },
            s.capms_args,
            match (s.workload_api, s.nodes) {
                (true, true) => "workload API reachable, Nodes registered",
                (true, false) => "workload API reachable",
                (false, _) => "no workload API",
            }
        );
        let _ = writeln!(
            t,
            "  all ready after        {:>8.1} s   lower bound {:.1} s (last machine created {:.1} s + lifecycle): {:.2}×",
            p.seconds_to_all_ready,
            p.lower_bound_seconds,
            p.last_machine_created_seconds,
            p.times_lower_bound
        );
        let _ = writeln!(
            t,
            "  Cluster API's bound    {:>8.1} s   (last owner reference + lifecycle): {:.2}× the lower bound, created → ready p90 {:.1} s",
            p.owned_bound_seconds,
            p.owned_bound_times_lower_bound,
            p.owned_bound_created_to_ready_p90_s
        );
        let spans = [
            ("created → owned (CAPI)", &l.created_to_owned_s),
            ("created → bootstrap", &l.created_to_bootstrap_s),
            ("owned → allocated", &l.owned_to_allocated_s),
            ("  owned → released", &l.owned_to_released_s),
            ("  gates → allocated", &l.gates_open_to_allocated_s),
            ("allocated → ready", &l.allocated_to_ready_s),
            ("  → phoned home (sim)", &l.allocated_to_phoned_home_s),
            ("  phoned home → ready", &l.phoned_home_to_ready_s),
            ("owned → ready (capms)", &l.owned_to_ready_s),
            ("created → ready", &l.created_to_ready_s),
        ];
        for (label, p) in spans {
            let _ = writeln!(
                t,
                "  {label:<22} p50 {:>6.1} s  p90 {:>6.1} s  max {:>6.1} s",
                p.p50, p.p90, p.max
            );
        }
        let up = &p.taken_up;
        let _ = writeln!(
            t,
            "  taken up by CAPI       last {:.1} s ({} of {} workers by the end of idle, its log); ready → taken up p50 {:.1} s  p90 {:.1} s  max {:.1} s; {:.2} completions per Machine",
            up.last_seconds,
            up.count,
            s.clusters * s.workers_per_cluster,
            up.ready_to_taken_up_s.p50,
            up.ready_to_taken_up_s.p90,
            up.ready_to_taken_up_s.max,
            up.completions_per_machine
        );
    }

    /// Cluster API's pace and the apiserver's load, against the baseline when there is one.
    pub fn write_shared_apiserver(&self, t: &mut String) {
        let p = &self.provisioning;
        let alone = self.capi_alone.as_ref();
        let or_none = |f: fn(&ClusterApiAlone) -> f64| alone.map_or(f64::NAN, f);
        let _ = writeln!(
            t,
            "  Cluster API's pace     last MetalStackMachine owned {:.1} s with capms, {:.1} s alone: {:.2}×; all ready {:.2}× (pace alone + lifecycle)",
            p.last_owned_seconds,
            or_none(|a| a.last_owned_seconds),
            self.pace_times_alone(),
            self.all_ready_times_alone_bound()
        );
        let _ = writeln!(
            t,
            "  MachineSets reported   every replica {:.1} s with capms, {:.1} s alone (what ends capms's wait for a MachineSet)",
            p.machine_sets_reported_seconds,
            or_none(|a| a.machine_sets_reported_seconds),
        );
        if let Some(ideal) = alone.and_then(|a| a.ideal.as_ref()) {
            let _ = writeln!(
                t,
                "  provider taking no time  (started once {}) all ready {:.1} s: {:.2}× (pace alone + lifecycle), capms {:.2}× its time; pace {:.1} s, MachineSets reported {:.1} s; apiserver {:.1} CPU-s, {:.2} requests per machine; Machine status conflicts {:.2} per worker",
                match ideal.start {
                    IdealStart::Owned => "owned",
                    IdealStart::Reported => "its MachineSet reported",
                },
                ideal.all_ready_seconds,
                ideal.all_ready_seconds / (or_none(|a| a.last_owned_seconds) + self.lifecycle()),
                p.seconds_to_all_ready / ideal.all_ready_seconds,
                ideal.last_owned_seconds,
                ideal.machine_sets_reported_seconds,
                ideal.apiserver.cpu_seconds,
                ideal.apiserver.requests_per_machine,
                ideal.apiserver.machine_status_conflicts_per_worker,
            );
        }
        let (o, whole) = (&self.apiserver_until_owned, &self.apiserver);
        let _ = writeln!(
            t,
            "  apiserver until owned  {:.1} CPU-s ({:.1} alone); requests per machine {:.2} ({:.2} alone): capms {:.2}, the rest {:.2}; admission calls {:.2}; Machine status conflicts {:.2} per worker ({:.2} alone)",
            o.cpu_seconds,
            or_none(|a| a.apiserver.cpu_seconds),
            o.requests_per_machine,
            or_none(|a| a.apiserver.requests_per_machine),
            o.capms_requests_per_machine,
            o.other_requests_per_machine,
            o.admission_calls_per_machine,
            o.machine_status_conflicts_per_worker,
            or_none(|a| a.apiserver.machine_status_conflicts_per_worker)
        );
        let _ = writeln!(
            t,
            "  apiserver to all ready {:.1} CPU-s; requests per machine {:.2}: capms {:.2}, the rest {:.2}; admission calls {:.2}; Machine status conflicts {:.2} per worker",
            whole.cpu_seconds,
            whole.requests_per_machine,
            whole.capms_requests_per_machine,
            whole.other_requests_per_machine,
            whole.admission_calls_per_machine,
            whole.machine_status_conflicts_per_worker
        );
        if let Some(causes) = &self.conflict_causes {
            let each = |(write, n): (&String, &f64)| {
                let refused = causes.conflicts_per_worker.get(write).copied();
                format!("{write} {n:.2} ({:.2} refused)", refused.unwrap_or(0.0))
            };
            let split: Vec<String> = causes.status_writes_per_worker.iter().map(each).collect();
            let own = causes.capms_writes_per_worker.iter();
            let own: Vec<String> = own.map(|(w, n)| format!("{w} {n:.2}")).collect();
            let _ = writeln!(
                t,
                "  Machine status writes  per worker, by capms's last write before them (audit log): {}; capms's writes per worker: {}",
                split.join(", "),
                own.join(", ")
            );
        }
    }

    /// metal-api calls, apiserver requests, reconciles and queue waits, orphans, deletion.
    fn write_costs(&self, t: &mut String) {
        let (p, i, d) = (&self.provisioning, &self.idle, &self.deletion);
        let _ = writeln!(
            t,
            "  metal-api calls        {:>8.2} per machine to provision, {:.2} to delete, {:.3}/s idle; {} answered resource_exhausted, {} unauthenticated",
            p.metal_calls_per_machine,
            d.metal_calls_per_machine,
            i.metal_calls_per_second,
            p.metal_calls_rate_limited + d.metal_calls_rate_limited,
            p.metal_calls_unauthenticated + d.metal_calls_unauthenticated
        );
        if let Some(tokens) = &self.v2_tokens {
            let _ = writeln!(
                t,
                "  API v2 tokens          {} of {} refreshed by capms (each minted to live {} s)",
                tokens.refreshed, tokens.clusters, tokens.lifetime_seconds
            );
        }
        let _ = writeln!(
            t,
            "  apiserver requests     {:>8.2} per machine to provision, {:.2} to delete, {:.2}/s idle",
            p.apiserver_requests_per_machine,
            d.apiserver_requests_per_machine,
            i.apiserver_requests_per_second
        );
        let _ = writeln!(
            t,
            "  reconciles             {:>8.2} per worker, {:.1} per cluster; {} admission calls",
            p.reconciles_per_worker, p.reconciles_per_cluster, p.admission_calls
        );
        let wait = |q: &str| p.queue_wait_mean_s.get(q).copied().unwrap_or(0.0) * 1000.0;
        let _ = writeln!(
            t,
            "  work-queue wait (mean) {:>8.1} ms MetalStackMachine, {:.1} ms MetalStackCluster",
            wait("metalstackmachine"),
            wait("metalstackcluster")
        );
        let _ = writeln!(
            t,
            "  orphans                {:>8} MetalStackMachines Cluster API left without a Machine (capms wrote to none)",
            p.orphans_left_by_cluster_api
        );
        let _ = writeln!(t, "  deletion               {:>8.1} s", d.seconds);
    }

    /// Admission latency, capms's CPU and memory, and the calls by route and resource.
    fn write_admission_and_capms(&self, t: &mut String) {
        let (p, a) = (&self.provisioning, &self.admission);
        let _ = writeln!(
            t,
            "  admission {:>4}/s × {:.0} s: p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms, {} errors, {} metal-api calls",
            a.rate,
            a.seconds,
            a.latency_ms.p50,
            a.latency_ms.p99,
            a.latency_ms.max,
            a.errors,
            a.metal_calls
        );
        let _ = writeln!(
            t,
            "  capms                  {:>8.1} CPU s ({}), peak RSS {:.1} MiB (the peak so far at the end of {})",
            self.capms.cpu_seconds,
            by_phase(&self.capms.cpu_seconds_by_phase),
            self.capms.peak_rss_mib,
            by_phase(&self.capms.peak_rss_mib_by_phase)
        );
        let _ = writeln!(
            t,
            "  metal-api calls to provision by route: {:?}",
            p.metal_calls
        );
        let _ = writeln!(
            t,
            "  apiserver requests to provision by resource: {:?}",
            p.apiserver_requests_by_resource
        );
    }
}

/// "phase value, …", one decimal each.
fn by_phase(values: &BTreeMap<String, f64>) -> String {
    values
        .iter()
        .map(|(phase, value)| format!("{phase} {value:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}
