//! controller-runtime's work-queue metrics for kube-runtime's controllers, whose scheduler does
//! not expose its queue. An object is *waiting* from the first watch event that wakes it until
//! its reconcile starts (a second wake while it waits is merged, as both queues merge it), and
//! *running* until its reconcile ends. From that: `workqueue_adds_total`, `workqueue_depth`,
//! `workqueue_queue_duration_seconds`, `workqueue_unfinished_work_seconds` and
//! `workqueue_longest_running_processor_seconds`, each labelled `name` with the controller.
//! Requeues a reconcile asks for are not adds here; failed reconciles count in
//! `workqueue_retries_total`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Histograms, QueueName, register, work_histogram};

/// The waiting and running objects of every controller's queue, by `namespace/name`.
#[derive(Debug, Default)]
struct Queue {
    waiting: HashMap<String, Instant>,
    running: HashMap<String, Instant>,
}

/// Every controller's queue; the depth and running-time gauges are computed when scraped.
#[derive(Debug, Clone)]
pub struct WorkQueues {
    queues: Arc<Mutex<BTreeMap<String, Queue>>>,
    adds: Family<QueueName, Counter>,
    queue_time: Histograms<QueueName>,
    work_time: Histograms<QueueName>,
    retries: Family<QueueName, Counter>,
}

impl WorkQueues {
    pub(super) fn register(registry: &mut prometheus_client::registry::Registry) -> WorkQueues {
        let queues = WorkQueues {
            queues: Arc::default(),
            adds: register(
                registry,
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                Family::default(),
            ),
            queue_time: register(
                registry,
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                Family::new_with_constructor(work_histogram),
            ),
            work_time: register(
                registry,
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                Family::new_with_constructor(work_histogram),
            ),
            retries: register(
                registry,
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                Family::default(),
            ),
        };
        registry.register_collector(Box::new(Gauges(queues.queues.clone())));
        queues
    }

    fn with<T>(&self, controller: &str, f: impl FnOnce(&mut Queue) -> T) -> Option<T> {
        let mut queues = self.queues.lock().ok()?;
        Some(f(queues.entry(controller.to_lowercase()).or_default()))
    }

    /// `controller`'s queue exists (empty, its gauges at 0) before anything wakes.
    pub(crate) fn declare(&self, controller: &str) {
        self.with(controller, |_| ());
        self.adds.get_or_create(&name(controller)).inc_by(0);
    }

    /// A watch event woke `key` (`namespace/name`) of `controller`.
    pub fn woken(&self, controller: &str, key: String) {
        let added = self.with(controller, |q| match q.waiting.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(Instant::now());
                true
            }
        });
        if added == Some(true) {
            self.adds.get_or_create(&name(controller)).inc();
        }
    }

    /// `key`'s reconcile starts.
    pub fn started(&self, controller: &str, key: &str) {
        let waited = self.with(controller, |q| {
            q.running.insert(key.to_owned(), Instant::now());
            q.waiting.remove(key)
        });
        if let Some(Some(since)) = waited {
            self.queue_time
                .get_or_create(&name(controller))
                .observe(since.elapsed().as_secs_f64());
        }
    }

    /// A reconcile of `controller` took `elapsed`.
    pub(super) fn worked(&self, controller: &str, elapsed: Duration) {
        self.work_time
            .get_or_create(&name(controller))
            .observe(elapsed.as_secs_f64());
    }

    /// A failed reconcile of `controller` is tried again.
    pub(super) fn retried(&self, controller: &str) {
        self.retries.get_or_create(&name(controller)).inc();
    }

    /// `key`'s reconcile ended.
    pub(crate) fn finished(&self, controller: &str, key: &str) {
        self.with(controller, |q| q.running.remove(key));
    }

    /// `key` was woken but is gone: its reconcile never runs.
    pub fn dropped(&self, controller: &str, key: &str) {
        self.with(controller, |q| q.waiting.remove(key));
    }
}

fn name(controller: &str) -> QueueName {
    QueueName {
        name: controller.to_lowercase(),
    }
}

/// The gauges, read from the queues at each scrape.
#[derive(Debug)]
struct Gauges(Arc<Mutex<BTreeMap<String, Queue>>>);

impl Collector for Gauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Instant::now();
        let rows: Vec<(QueueName, i64, f64, f64)> = match self.0.lock() {
            Ok(queues) => queues
                .iter()
                .map(|(controller, q)| {
                    let running = q.running.values().map(|t| (now - *t).as_secs_f64());
                    let (sum, longest) =
                        running.fold((0.0, 0.0_f64), |(s, l), r| (s + r, l.max(r)));
                    (name(controller), q.waiting.len() as i64, sum, longest)
                })
                .collect(),
            Err(_) => return Ok(()),
        };
        type Pick = fn(&(QueueName, i64, f64, f64)) -> Gauge;
        let gauges: [(&str, &str, Pick); 3] = [
            ("workqueue_depth", "Current depth of workqueue", |r| {
                Gauge::Count(r.1)
            }),
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
                |r| Gauge::Seconds(r.2),
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                |r| Gauge::Seconds(r.3),
            ),
        ];
        for (metric, help, pick) in gauges {
            let mut family = encoder.encode_descriptor(
                metric,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for row in &rows {
                let labelled = family.encode_family(&row.0)?;
                match pick(row) {
                    Gauge::Count(n) => ConstGauge::new(n).encode(labelled)?,
                    Gauge::Seconds(s) => ConstGauge::new(s).encode(labelled)?,
                }
            }
        }
        Ok(())
    }
}

enum Gauge {
    Count(i64),
    Seconds(f64),
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;

    #[test]
    fn a_woken_object_waits_runs_and_leaves_the_queue() {
        let m = Metrics::new();
        let q = &m.queues;
        q.woken("MetalStackMachine", "ns/a".into());
        q.woken("MetalStackMachine", "ns/a".into());
        q.woken("MetalStackMachine", "ns/b".into());
        let text = m.render();
        for expected in [
            "workqueue_adds_total{name=\"metalstackmachine\"} 2",
            "workqueue_depth{name=\"metalstackmachine\"} 2",
            "workqueue_longest_running_processor_seconds{name=\"metalstackmachine\"} 0.0",
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
        q.started("MetalStackMachine", "ns/a");
        std::thread::sleep(std::time::Duration::from_millis(2));
        q.dropped("MetalStackMachine", "ns/b");
        let text = m.render();
        assert!(
            text.contains("workqueue_depth{name=\"metalstackmachine\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("workqueue_queue_duration_seconds_count{name=\"metalstackmachine\"} 1"),
            "{text}"
        );
        let longest = "workqueue_longest_running_processor_seconds{name=\"metalstackmachine\"}";
        assert!(
            value(&text, longest) >= 0.002,
            "a reconcile is running: {text}"
        );
        q.finished("MetalStackMachine", "ns/a");
        let text = m.render();
        let unfinished = "workqueue_unfinished_work_seconds{name=\"metalstackmachine\"}";
        assert_eq!(value(&text, unfinished), 0.0, "{text}");
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(f64::NAN)
    }
}
