//! Requests the simulator answered, counted by route template, method and status: what a
//! benchmark reads from `GET /sim/stats` to count metal-api calls at the server, whoever the
//! client is. Not part of metal-api.

use jiff::Timestamp;
use serde::Serialize;
use std::collections::BTreeMap;

/// The route of requests that matched no metal-api route (answered 404).
pub const UNMATCHED: &str = "(unmatched)";

#[derive(Debug)]
pub struct RequestStats {
    since: Timestamp,
    counts: BTreeMap<(String, String, u16), u64>,
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats {
            since: Timestamp::now(),
            counts: BTreeMap::new(),
        }
    }
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
}
