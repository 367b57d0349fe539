//! Switchable misbehaviour, for reliability tests (`PUT /sim/faults`). Not part of metal-api.
//!
//! A setting the simulator does not know, or a value out of its range, is refused naming the
//! field: a misspelt fault that were silently off would let a fault test pass without a fault.

use std::collections::BTreeSet;

/// The faults the simulator makes, each switched by its own field.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Added to every metal-api request.
    pub latency_ms: u64,
    /// Fraction (0..1) of metal-api requests answered with an error instead of being carried
    /// out.
    pub error_rate: f64,
    /// The statuses of `error_rate`'s answers, one picked at random each time (default 503).
    pub error_codes: Vec<u16>,
    /// Fraction (0..1) of metal-api requests carried out whose answer is lost: a 502, as a proxy
    /// gives when metal-api's answer does not reach it.
    pub lost_answer_rate: f64,
    /// Fraction (0..1) of metal-api requests carried out and then answered only after
    /// `timeout_ms`, when the client has long given up.
    pub timeout_rate: f64,
    /// How long a request of `timeout_rate` is held (default 12 s, past metal-go's and capms's
    /// 10 s).
    pub timeout_ms: Option<u64>,
    /// Fraction (0..1) of metal-api requests delayed by `spike_ms` before being carried out.
    pub spike_rate: f64,
    /// The delay of a latency spike (default 2 s).
    pub spike_ms: Option<u64>,
    /// Fraction (0..1) of new connections closed before a request is read.
    pub drop_rate: f64,
    /// Machines that stop after `Booting New Kernel`.
    pub never_phone_home: BTreeSet<String>,
    /// Machines that PXE-boot again instead of phoning home.
    pub crash_loop: BTreeSet<String>,
    /// Machines whose heartbeats stopped.
    pub dead: BTreeSet<String>,
    /// Machines that hang: no heartbeats, no events, their Node `NotReady`. A power cycle or
    /// reset, or a reinstall, cures them (takes them out of this set).
    pub hung: BTreeSet<String>,
    /// Machines that hang again after every reboot or reinstall: a cure leaves them in `hung`,
    /// or puts them back, and they never phone home.
    pub incurable: BTreeSet<String>,
}

/// The longest delay a fault may add: an hour is no fault but a hang.
const LONGEST_MS: u64 = 3_600_000;

impl Faults {
    /// The first setting out of range, named with its field and what it may be; `machine`
    /// tells whether the simulator has a machine of that id.
    pub fn check(&self, machine: impl Fn(&str) -> bool) -> Result<(), String> {
        let rates = [
            ("error_rate", self.error_rate),
            ("lost_answer_rate", self.lost_answer_rate),
            ("timeout_rate", self.timeout_rate),
            ("spike_rate", self.spike_rate),
            ("drop_rate", self.drop_rate),
        ];
        for (field, rate) in rates {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!(
                    "{field}: {rate} is not a fraction; it must lie between 0 and 1"
                ));
            }
        }
        if let Some(code) = self.error_codes.iter().find(|c| !(400..=599).contains(*c)) {
            return Err(format!(
                "error_codes: {code} is not an error status; each must lie between 400 and 599"
            ));
        }
        let delays = [
            ("latency_ms", Some(self.latency_ms)),
            ("timeout_ms", self.timeout_ms),
            ("spike_ms", self.spike_ms),
        ];
        for (field, delay) in delays {
            if let Some(ms) = delay.filter(|ms| *ms > LONGEST_MS) {
                return Err(format!(
                    "{field}: {ms} ms is longer than an hour ({LONGEST_MS} ms), the longest delay a fault may add"
                ));
            }
        }
        let machines = [
            ("never_phone_home", &self.never_phone_home),
            ("crash_loop", &self.crash_loop),
            ("dead", &self.dead),
            ("hung", &self.hung),
            ("incurable", &self.incurable),
        ];
        for (field, ids) in machines {
            if let Some(id) = ids.iter().find(|id| !machine(id)) {
                return Err(format!("{field}: the simulator has no machine {id:?}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(json: &str) -> Result<Faults, String> {
        serde_json::from_str::<Faults>(json).map_err(|e| e.to_string())
    }

    #[test]
    fn an_unknown_setting_is_refused_naming_it_and_the_known_ones() {
        let error = parsed(r#"{"error_rte": 0.2}"#).expect_err("misspelt");
        assert!(error.contains("unknown field `error_rte`"), "{error}");
        assert!(error.contains("`error_rate`"), "{error}");
        assert_eq!(parsed("{}"), Ok(Faults::default()));
    }

    #[test]
    fn values_out_of_range_are_refused_naming_the_field() {
        let known = |id: &str| id == "m1";
        let cases = [
            (
                r#"{"error_rate": 1.5}"#,
                "error_rate: 1.5 is not a fraction",
            ),
            (
                r#"{"drop_rate": -0.1}"#,
                "drop_rate: -0.1 is not a fraction",
            ),
            (
                r#"{"error_codes": [503, 200]}"#,
                "error_codes: 200 is not an error status",
            ),
            (
                r#"{"spike_ms": 3600001}"#,
                "spike_ms: 3600001 ms is longer than an hour",
            ),
            (
                r#"{"dead": ["m1", "m2"]}"#,
                "dead: the simulator has no machine \"m2\"",
            ),
            (
                r#"{"hung": ["m3"]}"#,
                "hung: the simulator has no machine \"m3\"",
            ),
            (
                r#"{"hung": ["m1"], "incurable": ["m1", "nope"]}"#,
                "incurable: the simulator has no machine \"nope\"",
            ),
        ];
        for (json, expected) in cases {
            let faults = parsed(json).expect("well-formed");
            let error = faults.check(known).expect_err(json);
            assert!(error.starts_with(expected), "{json}: {error}");
        }
        let fine =
            parsed(r#"{"error_rate": 1, "error_codes": [500], "dead": ["m1"], "spike_ms": 2000}"#);
        assert_eq!(fine.expect("well-formed").check(known), Ok(()));
        let hanging = parsed(r#"{"hung": ["m1"], "incurable": ["m1"]}"#).expect("well-formed");
        assert_eq!(hanging.check(known), Ok(()));
        assert_eq!(hanging.hung, BTreeSet::from(["m1".to_owned()]));
    }
}
