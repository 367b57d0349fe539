//! Requests the simulator answered, counted by route template, method and status: what a
//! benchmark reads from `GET /sim/stats` to count metal-api calls at the server, whoever the
//! client is; and how often each fault of `/sim/faults` struck, against how often it could, so
//! that a fault test can tell its faults happened. Not part of metal-api.

use jiff::Timestamp;
use serde::Serialize;
use std::collections::BTreeMap;

/// The route of requests that matched no metal-api route (answered 404).
pub const UNMATCHED: &str = "(unmatched)";

#[derive(Debug)]
pub struct RequestStats {
    since: Timestamp,
    counts: BTreeMap<(String, String, u16), u64>,
    pub faults: FaultCounts,
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats {
            since: Timestamp::now(),
            counts: BTreeMap::new(),
            faults: FaultCounts::default(),
        }
    }
}

/// How often each fault struck, beside how often it could have.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct FaultCounts {
    /// metal-api requests the faults met; an error or a spike may strike each.
    pub requests: u64,
    /// Answered with an injected error instead of being carried out.
    pub errors: u64,
    /// Delayed by a spike.
    pub spikes: u64,
    /// Requests carried out; a lost answer or a timeout may strike each.
    pub carried_out: u64,
    /// Carried out and answered 502.
    pub lost_answers: u64,
    /// Carried out and held past the client's timeout.
    pub timeouts: u64,
    /// New connections; a drop may strike each.
    pub connections: u64,
    /// Closed before a request was read.
    pub dropped: u64,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RouteCount {
    /// The route template as metal-api's spec writes it (`/v1/machine/{id}`), without the base
    /// path.
    pub route: String,
    pub method: String,
    pub status: u16,
    pub count: u64,
}

/// `GET /sim/stats`: every counted request since `since`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct StatsReport {
    pub since: Timestamp,
    pub total: u64,
    pub requests: Vec<RouteCount>,
    #[serde(default)]
    pub faults: FaultCounts,
}

/// A fault set to strike `rate` of its `chances` and struck `struck` times: a line saying so,
/// and whether that is about as often as set. Within four standard deviations of the binomial
/// (plus 2, for small counts) it is; a fault left off or striking every time falls outside
/// (chance alone does so about once in 15,000 runs). Where 10 or more strikes were expected, a
/// fault that never struck is off.
fn judged(what: &str, struck: u64, chances: u64, rate: f64) -> (bool, String) {
    let n = chances as f64;
    let expected = rate * n;
    let tolerance = 4.0 * (n * rate * (1.0 - rate)).sqrt() + 2.0;
    let line = format!(
        "{what}: {struck} of {chances} (set to {rate}, expected {expected:.1} ± {tolerance:.1})"
    );
    let off = expected >= 10.0 && struck == 0;
    ((struck as f64 - expected).abs() <= tolerance && !off, line)
}

impl FaultCounts {
    /// Did each fault of `faults` strike about as often as it was set to? A line per fault,
    /// joined by "; ", as Ok when every one did, else as Err.
    pub fn judge(&self, faults: &crate::state::Faults) -> Result<String, String> {
        let checks = [
            judged("errors", self.errors, self.requests, faults.error_rate),
            judged("spikes", self.spikes, self.requests, faults.spike_rate),
            judged(
                "lost answers",
                self.lost_answers,
                self.carried_out,
                faults.lost_answer_rate,
            ),
            judged(
                "timeouts",
                self.timeouts,
                self.carried_out,
                faults.timeout_rate,
            ),
            judged(
                "dropped connections",
                self.dropped,
                self.connections,
                faults.drop_rate,
            ),
        ];
        let text = checks
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        match checks.iter().all(|(ok, _)| *ok) {
            true => Ok(text),
            false => Err(text),
        }
    }

    /// Strikes of every kind together.
    pub fn struck(&self) -> u64 {
        self.errors + self.spikes + self.lost_answers + self.timeouts + self.dropped
    }
}

impl RequestStats {
    pub fn record(&mut self, route: &str, method: &str, status: u16) {
        *self
            .counts
            .entry((route.to_owned(), method.to_owned(), status))
            .or_default() += 1;
    }

    /// Forgets every count; the report starts again from now.
    pub fn reset(&mut self) {
        *self = RequestStats::default();
    }

    pub fn report(&self) -> StatsReport {
        let requests: Vec<RouteCount> = self
            .counts
            .iter()
            .map(|((route, method, status), count)| RouteCount {
                route: route.clone(),
                method: method.clone(),
                status: *status,
                count: *count,
            })
            .collect();
        StatsReport {
            since: self.since,
            total: requests.iter().map(|r| r.count).sum(),
            requests,
            faults: self.faults.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_route_method_and_status_until_reset() {
        let mut stats = RequestStats::default();
        stats.record("/v1/machine/{id}", "GET", 200);
        stats.record("/v1/machine/{id}", "GET", 200);
        stats.record("/v1/machine/{id}", "GET", 404);
        stats.record(UNMATCHED, "GET", 404);
        let report = stats.report();
        assert_eq!(report.total, 4);
        assert_eq!(
            report.requests[1],
            RouteCount {
                route: "/v1/machine/{id}".into(),
                method: "GET".into(),
                status: 200,
                count: 2
            }
        );
        stats.reset();
        assert_eq!(stats.report().total, 0);
    }

    #[test]
    fn a_fault_is_judged_against_the_rate_it_was_set_to() {
        let faults = crate::state::Faults {
            error_rate: 0.2,
            ..Default::default()
        };
        let counts = |errors| FaultCounts {
            requests: 100,
            errors,
            ..Default::default()
        };
        assert!(counts(20).judge(&faults).is_ok());
        assert!(counts(4).judge(&faults).is_ok(), "within four deviations");
        let off = counts(0).judge(&faults).expect_err("left off");
        assert!(
            off.starts_with("errors: 0 of 100 (set to 0.2, expected 20.0"),
            "{off}"
        );
        assert!(counts(60).judge(&faults).is_err(), "far too often");
        assert!(FaultCounts::default().judge(&Default::default()).is_ok());
    }
}
