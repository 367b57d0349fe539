//! What capms has looked at and what it has done, as its own debug log, its metrics and the
//! simulator tell: the positive signals a test's "capms did not act" stands on. A sleep cannot
//! tell "did not act" from "has not looked yet"; these can.
//!
//! capms ends every reconcile that looked with a debug line `reconciled` naming the object, the
//! resourceVersion it read, the step it took and when it looks again. A test changes an object,
//! waits until capms has reconciled it at that change's resourceVersion or a later one (as many
//! times as the property needs), and then compares capms's actions with those before the change.

use std::collections::BTreeMap;

/// One reconcile, as capms's log reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    /// `Kind namespace/name`.
    pub object: String,
    pub resource_version: u64,
    /// The step's name (`Nothing`, `Allocate`, …), or `none` when observing failed.
    pub step: String,
    /// When capms looks again (`Ok(AwaitChange)`, …) or the error it ended with.
    pub next: String,
}

/// Every reconcile in `log`, in order.
pub fn reconciled(log: &str) -> Vec<Reconciled> {
    log.lines().filter_map(parse).collect()
}

/// A `reconciled` line: `… reconciled object=Kind ns/name resource_version=7 step=Nothing next=…`.
fn parse(line: &str) -> Option<Reconciled> {
    let (_, fields) = line.split_once(" reconciled object=")?;
    let (object, rest) = fields.split_once(" resource_version=")?;
    let (version, rest) = rest.split_once(" step=")?;
    let (step, next) = rest.split_once(" next=")?;
    Some(Reconciled {
        object: object.to_owned(),
        resource_version: version.parse().ok()?,
        step: step.to_owned(),
        next: next.to_owned(),
    })
}

/// The reconciles of `object` at `version` or later.
pub fn looks_at(log: &str, object: &str, version: u64) -> Vec<Reconciled> {
    reconciled(log)
        .into_iter()
        .filter(|r| r.object == object && r.resource_version >= version)
        .collect()
}

/// Waits (as long as a loaded machine needs) until `log` shows `object` (`Kind ns/name`)
/// reconciled `times` times at `version` or later; those reconciles.
pub async fn looked(
    log: impl Fn() -> String,
    object: &str,
    version: u64,
    times: usize,
) -> Vec<Reconciled> {
    let what =
        format!("capms reconciling {object} {times} times at resourceVersion {version} or later");
    crate::eventually_seen(&what, crate::LOADED_MACHINE_WAIT, || {
        let looks = looks_at(&log(), object, version);
        let seen = match looks.len() >= times {
            true => Ok(looks),
            false => Err(format!("{} so far: {looks:?}", looks.len())),
        };
        std::future::ready(seen)
    })
    .await
}

/// The resourceVersion of an object, as a number (one apiserver's etcd revision).
pub fn version_of<K: kube::Resource>(obj: &K) -> u64 {
    let version = obj.meta().resource_version.as_deref().unwrap_or_default();
    version
        .parse()
        .unwrap_or_else(|_| panic!("resourceVersion {version:?}"))
}

/// capms's actions up to a moment: its writes to Kubernetes by method and resource (as its
/// client counts them in `rest_client_requests_total`), except its status reports and the
/// Events, Leases and reviews of its metrics server; and the writes metal-api received by
/// route and method (every call but reads and finds, as the simulator counts them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Actions {
    pub kube: BTreeMap<String, u64>,
    pub metal: BTreeMap<String, u64>,
}

/// What capms did not act on: Kubernetes resources it only reports to or keeps running with.
const NOT_ACTIONS: [&str; 4] = ["events", "leases", "tokenreviews", "subjectaccessreviews"];

impl Actions {
    /// capms's actions now: its metrics on `metrics_port` (plain HTTP) and `sim`'s counts.
    pub async fn now(metrics_port: u16, sim: &metal_sim::Sim) -> Actions {
        let text = metrics(metrics_port).await;
        let text = text.unwrap_or_else(|| panic!("capms's metrics on port {metrics_port}"));
        let mut kube = BTreeMap::new();
        for (labels, count) in samples(&text, "rest_client_requests_total") {
            let (method, resource) = (label(&labels, "method"), label(&labels, "resource"));
            let report = resource.ends_with("/status");
            if method == "GET" || report || NOT_ACTIONS.contains(&resource.as_str()) {
                continue;
            }
            *kube.entry(format!("{method} {resource}")).or_default() += count;
        }
        let mut metal = BTreeMap::new();
        for r in sim.stats().report().requests {
            if r.method == "GET" || r.route.ends_with("/find") {
                continue;
            }
            *metal
                .entry(format!("{} {}", r.method, r.route))
                .or_default() += r.count;
        }
        Actions { kube, metal }
    }
}

/// capms's metrics on `port` (plain HTTP), in Prometheus's text exposition; None while it does
/// not answer.
pub async fn metrics(port: u16) -> Option<String> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let response = reqwest::get(&url).await.ok()?.error_for_status().ok()?;
    response.text().await.ok()
}

/// The sum of the samples of `metric` in `text` whose labels (`a="x",b="y"`; empty for a metric
/// without labels) `matching` accepts.
pub fn total(text: &str, metric: &str, matching: impl Fn(&str) -> bool) -> u64 {
    let samples = samples(text, metric).into_iter();
    samples
        .filter(|(labels, _)| matching(labels))
        .map(|(_, n)| n)
        .sum()
}

/// `(labels, value)` of every sample of `metric` in a Prometheus text exposition.
fn samples(text: &str, metric: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(metric))
        .filter_map(|rest| {
            let (labels, value) = match rest.strip_prefix('{') {
                Some(labelled) => labelled.rsplit_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            Some((labels.to_owned(), value.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

fn label(labels: &str, name: &str) -> String {
    labels
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"').to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_are_read_from_capms_debug_lines() {
        let log = "2026-11-27T10:00:00.1Z DEBUG reconciling object{object.ref=MetalStackCluster.v1alpha4.infrastructure.cluster.x-k8s.io/c.ns object.reason=object updated}: capms::reconciler: reconciled object=MetalStackCluster ns/c resource_version=812 step=Nothing next=Ok(AwaitChange)\nunrelated\n";
        let seen = reconciled(log);
        assert_eq!(
            seen,
            [Reconciled {
                object: "MetalStackCluster ns/c".into(),
                resource_version: 812,
                step: "Nothing".into(),
                next: "Ok(AwaitChange)".into(),
            }]
        );
        assert_eq!(looks_at(log, "MetalStackCluster ns/c", 812).len(), 1);
        assert!(looks_at(log, "MetalStackCluster ns/c", 813).is_empty());
    }

    #[test]
    fn samples_and_labels_are_read_from_the_exposition() {
        let text = "# HELP rest_client_requests_total x\nrest_client_requests_total{code=\"200\",host=\"h\",method=\"PATCH\",resource=\"metalstackmachines\"} 3\nrest_client_requests_total_created 1\n";
        let found = samples(text, "rest_client_requests_total");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1, 3);
        assert_eq!(label(&found[0].0, "resource"), "metalstackmachines");
        let text =
            format!("{text}capms_orphan_sweeps_total 4\ncapms_orphan_sweeps_total_created 1\n");
        assert_eq!(total(&text, "capms_orphan_sweeps_total", |_| true), 4);
        let patches = total(&text, "rest_client_requests_total", |l| l.contains("PATCH"));
        assert_eq!(patches, 3);
        assert_eq!(
            total(&text, "rest_client_requests_total", |l| l.contains("GET")),
            0
        );
    }
}
