//! What a crash-point run went through, judged: every phase had kills, around every kind of
//! write, and every write site of `write-sites.txt` was killed at before and after its write.

use super::*;

/// The phases of the whole run.
pub(super) const PHASES: [&str; 12] = [
    "provisioning",
    "firewall rollout",
    "scale-down",
    "after a move",
    "a power cycle",
    "a remediation wound up",
    "a remediation within its cooldown",
    "a reinstall",
    "a Go provider's cluster",
    "its firewall template changed",
    "orphans",
    "deletion",
];

impl Lives {
    /// Every phase had kills, around every kind of write, and a kill before and after the write
    /// of every write site there is; at least [`MIN_POINTS`] distinct points. The report goes to
    /// stderr, and to `CAPMS_CRASH_REPORT` when set.
    pub(super) fn report(&self, workers: usize) {
        let (missed, distinct) = self.judged(workers, &PHASES, "");
        assert!(
            missed.is_empty(),
            "write sites never killed at: {missed:#?}"
        );
        assert!(
            distinct >= MIN_POINTS,
            "{distinct} distinct kill points, fewer than {MIN_POINTS}"
        );
    }

    /// Every one of `phases` had kills, and there were kills before and after every kind of
    /// write; the report (its title with `run` added) goes to stderr, and to
    /// `CAPMS_CRASH_REPORT` (with `run` before its extension) when set. The write sites never
    /// killed at, and the number of distinct points.
    pub(super) fn judged(
        &self,
        workers: usize,
        phases: &[&str],
        run: &str,
    ) -> (Vec<String>, usize) {
        let points: Vec<String> = self
            .kills
            .iter()
            .map(|(p, k)| format!("{p}: {k}"))
            .collect();
        let mut distinct = points.clone();
        distinct.sort();
        distinct.dedup();
        let sites = write_sites();
        let missed: Vec<String> = sites
            .iter()
            .flat_map(|site| ["before", "after"].map(|when| (site, when)))
            .filter(|(site, when)| !self.killed_around_write(site, when))
            .map(|(site, when)| format!("{site} ({when} its write)"))
            .collect();
        // Every write site of the product, and whether a kill fell before and after its write.
        let table: Vec<String> = sites
            .iter()
            .map(|site| {
                let mark = |when| match self.killed_around_write(site, when) {
                    true => "killed",
                    false => "NEVER",
                };
                format!("{site}: {} before, {} after", mark("before"), mark("after"))
            })
            .collect();
        let complete = table.iter().filter(|t| !t.contains("NEVER")).count();
        let report = format!(
            "crash points{run} with {workers} workers: {} kills at {} distinct points (by phase and code location), each followed by recovery; write sites killed at before and after their write: {complete} of {}; duplicates 0, leaks 0; {} log lines at debug level without a secret\n\nwrite sites:\n{}\n\nkills:\n{}\n",
            self.kills.len(),
            distinct.len(),
            sites.len(),
            self.lines,
            table.join("\n"),
            points.join("\n")
        );
        eprintln!("{report}");
        if let Ok(path) = std::env::var("CAPMS_CRASH_REPORT") {
            let path = std::path::PathBuf::from(path);
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            let name = format!("{}{}.txt", stem.unwrap_or_default(), run.replace(' ', "-"));
            std::fs::write(path.with_file_name(name), &report).expect("write the report");
        }
        for phase in phases {
            assert!(
                self.kills.iter().any(|(p, _)| p == phase),
                "no kill in {phase}"
            );
        }
        for write in ["metal-api", "Kubernetes write", "Kubernetes status"] {
            for when in ["before", "after"] {
                assert!(
                    self.kills
                        .iter()
                        .any(|(_, k)| k.contains(write) && k.ends_with(when)),
                    "no kill {when} a {write} call"
                );
            }
        }
        (missed, distinct.len())
    }

    /// Was capms killed `when` ("before" or "after") the write of `site`
    /// (`MetalStackMachine Allocate`): its Kubernetes write, status write or metal-api call?
    fn killed_around_write(&self, site: &str, when: &str) -> bool {
        self.kills.iter().any(|(_, point)| {
            point
                .strip_prefix(site)
                .and_then(|rest| rest.strip_prefix(": "))
                .is_some_and(|call| call.ends_with(&format!(" {when}")))
        })
    }
}

/// Every code location where capms writes to metal-api or Kubernetes (capms's unit test keeps
/// the list complete).
fn write_sites() -> Vec<String> {
    let file = repo_root().join("tests/controllers/write-sites.txt");
    let text = std::fs::read_to_string(file).expect("write-sites.txt");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_owned)
        .collect()
}
