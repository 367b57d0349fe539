//! What capms reports about itself (its `/metrics`: apiserver requests, reconciles, admission),
//! what the kube-apiserver reports (its `/metrics`: every client's requests), and what the kernel
//! says a process used (CPU seconds, peak RSS).

use serde::Serialize;
use std::collections::BTreeMap;

/// capms's counters at one moment: every `_total`, `_sum` and `_count` sample, keyed by name
/// and labels.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    samples: BTreeMap<(String, BTreeMap<String, String>), f64>,
}

impl Counters {
    /// Parses the Prometheus text format's counter samples.
    fn parse(text: &str) -> Counters {
        let mut samples = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, labels_of(rest.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            // Counters, and histograms' sums and counts (counters too).
            if ["_total", "_sum", "_count"]
                .iter()
                .any(|s| name.ends_with(s))
            {
                samples.insert((name.to_owned(), labels), value);
            }
        }
        Counters { samples }
    }

    /// What was counted since `before`.
    pub fn minus(&self, before: &Counters) -> Counters {
        let samples = self
            .samples
            .iter()
            .map(|(k, v)| (k.clone(), v - before.samples.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, v)| *v != 0.0)
            .collect();
        Counters { samples }
    }

    /// The sum of `name`'s samples, grouped by the value of `label`.
    pub fn by(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for ((n, labels), v) in &self.samples {
            if n == name {
                let key = labels.get(label).cloned().unwrap_or_default();
                *out.entry(key).or_insert(0.0) += v;
            }
        }
        out
    }

    pub fn total(&self, name: &str) -> f64 {
        self.sum_where(name, |_| true)
    }

    /// The sum of `name`'s samples whose labels `keep` accepts.
    pub fn sum_where(&self, name: &str, keep: impl Fn(&BTreeMap<String, String>) -> bool) -> f64 {
        self.samples
            .iter()
            .filter(|((n, labels), _)| n == name && keep(labels))
            .map(|(_, v)| v)
            .sum::<f64>()
            // An empty sum is -0.0.
            + 0.0
    }

    /// The kube-apiserver's requests (`apiserver_request_total`) by `VERB resource[/subresource]`.
    pub fn apiserver_requests_by_verb_and_resource(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for ((n, labels), v) in &self.samples {
            if n != APISERVER_REQUESTS {
                continue;
            }
            let label = |l: &str| labels.get(l).map(String::as_str).unwrap_or_default();
            let resource = match label("subresource") {
                "" => label("resource").to_owned(),
                sub => format!("{}/{sub}", label("resource")),
            };
            *out.entry(format!("{} {resource}", label("verb")))
                .or_insert(0.0) += v;
        }
        out
    }
}

/// The kube-apiserver's count of the requests it served, from every client.
pub const APISERVER_REQUESTS: &str = "apiserver_request_total";

/// Reads the kube-apiserver's own `/metrics` as its admin.
pub struct ApiserverScrape {
    client: kube::Client,
}

impl ApiserverScrape {
    pub fn new(client: kube::Client) -> ApiserverScrape {
        ApiserverScrape { client }
    }

    pub async fn counters(&self) -> Counters {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .expect("a GET request");
        let text = self
            .client
            .request_text(request)
            .await
            .expect("kube-apiserver /metrics answers its admin");
        Counters::parse(&text)
    }
}

/// `a="x",b="y"` into a map (values are never escaped in what capms writes).
fn labels_of(text: &str) -> BTreeMap<String, String> {
    text.split("\",")
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim_matches('"').to_owned()))
        .collect()
}

/// Reads capms's plain-HTTP `/metrics`.
pub struct Scrape {
    url: String,
}

impl Scrape {
    pub fn new(port: u16) -> Scrape {
        Scrape {
            url: format!("http://127.0.0.1:{port}/metrics"),
        }
    }

    pub async fn counters(&self) -> Counters {
        let text = reqwest::get(&self.url)
            .await
            .expect("capms /metrics answers")
            .text()
            .await
            .expect("metrics text");
        Counters::parse(&text)
    }
}

/// CPU time (in total and by phase) and peak memory of a process, from /proc.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessUsage {
    pub cpu_seconds: f64,
    pub cpu_seconds_by_phase: BTreeMap<String, f64>,
    pub peak_rss_mib: f64,
    /// The peak so far at each phase's end: the phase whose value first reaches the overall
    /// peak is the one that set it.
    pub peak_rss_mib_by_phase: BTreeMap<String, f64>,
}

/// Takes a process's CPU time at each phase's end.
pub struct CpuClock {
    pid: u32,
    last: f64,
    usage: ProcessUsage,
}

impl CpuClock {
    /// Starts counting now; what the process used before is `startup`.
    pub fn start(pid: u32) -> CpuClock {
        let mut clock = CpuClock {
            pid,
            last: 0.0,
            usage: ProcessUsage::default(),
        };
        clock.phase("startup");
        clock
    }

    /// `phase` ends now.
    pub fn phase(&mut self, phase: &str) {
        let now = ProcessUsage::of(self.pid);
        self.usage
            .cpu_seconds_by_phase
            .insert(phase.to_owned(), now.cpu_seconds - self.last);
        self.last = now.cpu_seconds;
        self.usage.cpu_seconds = now.cpu_seconds;
        self.usage.peak_rss_mib = now.peak_rss_mib;
        self.usage
            .peak_rss_mib_by_phase
            .insert(phase.to_owned(), now.peak_rss_mib);
    }

    pub fn usage(&self) -> ProcessUsage {
        self.usage.clone()
    }
}

impl ProcessUsage {
    pub fn of(pid: u32) -> ProcessUsage {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
        // Fields after the command name (which may hold spaces): state is the 3rd field, utime
        // and stime the 14th and 15th.
        let after = stat.rsplit_once(')').map(|(_, s)| s).unwrap_or_default();
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // Linux reports in USER_HZ, 100 on every architecture it runs on.
        let cpu_seconds = (ticks(11) + ticks(12)) / 100.0;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        let hwm_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        ProcessUsage {
            cpu_seconds,
            peak_rss_mib: hwm_kib / 1024.0,
            ..Default::default()
        }
    }
}
