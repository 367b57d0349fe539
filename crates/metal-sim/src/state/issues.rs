//! Machine issues (`metalctl machine issues`): the catalogue metal-api publishes and the subset
//! of its checks the simulator's machines can fail: liveliness, crash loops, failed reclaims and
//! recent error events.

use super::*;

const MINOR: &str = "minor";
const MAJOR: &str = "major";
const CRITICAL: &str = "critical";
/// metal-api's default window for `last-event-error`: one week.
const DEFAULT_ERROR_THRESHOLD_SECS: i64 = 7 * 24 * 3600;

/// The issues the simulator evaluates: id, severity, description.
const CATALOGUE: [(&str, &str, &str); 5] = [
    (
        "liveliness-dead",
        MAJOR,
        "the machine is not sending events anymore",
    ),
    (
        "liveliness-unknown",
        MAJOR,
        "the machine is not sending LLDP alive messages anymore",
    ),
    (
        "failed-machine-reclaim",
        CRITICAL,
        "machine phones home but not allocated",
    ),
    (
        "crashloop",
        MAJOR,
        "machine is in a provisioning crash loop (⭕)",
    ),
    (
        "last-event-error",
        MINOR,
        "the machine had an error during the provisioning lifecycle recently",
    ),
];

fn severity_rank(severity: &str) -> u8 {
    match severity {
        CRITICAL => 2,
        MAJOR => 1,
        _ => 0,
    }
}

impl State {
    /// `GET /v1/machine/issues`.
    pub fn issue_catalogue(&self) -> Vec<MachineIssue> {
        CATALOGUE
            .iter()
            .map(|(id, severity, description)| MachineIssue {
                id: (*id).into(),
                severity: (*severity).into(),
                description: (*description).into(),
                ref_url: format!(
                    "https://docs.metal-stack.io/stable/installation/troubleshoot/#{id}"
                ),
                details: String::new(),
            })
            .collect()
    }

    /// `POST /v1/machine/issues/evaluate`: the machines the find selects that have at least one
    /// issue of the requested ids and severity.
    pub fn evaluate_issues(
        &self,
        req: &MachineIssuesRequest,
    ) -> SimResult<Vec<MachineIssueResponse>> {
        if !req.severity.is_empty() && ![MINOR, MAJOR, CRITICAL].contains(&req.severity.as_str()) {
            return Err(SimError::bad_request(format!(
                "severity {:?} is unknown; valid: {MINOR}, {MAJOR}, {CRITICAL}",
                req.severity
            )));
        }
        let wanted: Vec<&str> = CATALOGUE
            .iter()
            .filter(|(id, severity, _)| {
                (req.only.is_empty() || req.only.iter().any(|o| o == id))
                    && !req.omit.iter().any(|o| o == id)
                    && severity_rank(severity) >= severity_rank(&req.severity)
            })
            .map(|(id, _, _)| *id)
            .collect();
        let threshold = if req.last_error_threshold > 0 {
            req.last_error_threshold
        } else {
            DEFAULT_ERROR_THRESHOLD_SECS
        };
        let ids: BTreeSet<String> = self
            .machine_find(&req.find)
            .into_iter()
            .map(|m| m.id)
            .collect();
        Ok(ids
            .iter()
            .filter_map(|id| self.machines.get(id))
            .filter_map(|m| {
                let issues: Vec<String> = wanted
                    .iter()
                    .filter(|issue| self.has_issue(m, issue, threshold))
                    .map(|issue| (*issue).to_owned())
                    .collect();
                (!issues.is_empty()).then(|| MachineIssueResponse {
                    machineid: m.id.clone(),
                    issues,
                })
            })
            .collect())
    }

    fn has_issue(&self, m: &MachineRecord, issue: &str, threshold_secs: i64) -> bool {
        match issue {
            "liveliness-dead" => self.liveliness(m) == liveliness::DEAD,
            "liveliness-unknown" => self.liveliness(m) == liveliness::UNKNOWN,
            "failed-machine-reclaim" => m.failed_machine_reclaim,
            "crashloop" => m.crash_loop,
            "last-event-error" => m.last_error_event.as_ref().is_some_and(|e| {
                Timestamp::now().duration_since(e.time).as_secs() < threshold_secs
            }),
            _ => false,
        }
    }
}
