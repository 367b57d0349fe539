//! When Cluster API's Machine controller saw each machine provisioned, read off its own log: the
//! first "Infrastructure provider has completed provisioning" line of each Machine. The bench's
//! watch of the Machines falls seconds behind the apiserver's writes when the apiserver is busy,
//! and Cluster API's log does not; a Machine logged more than once was reconciled again from a
//! cache that did not hold its own write yet (what capms's writes should not provoke).

use std::collections::BTreeMap;

/// What Cluster API logs once it copies a provider's machine into its Machine.
const COMPLETED: &str = "\"Infrastructure provider has completed provisioning\"";

/// One Machine as Cluster API's log tells it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Provisioned {
    /// Seconds from the origin to its first completion line.
    pub first: f64,
    /// How many completion lines it has.
    pub lines: usize,
}

/// Each Machine's completions in `log` (klog lines, local time), by Machine name, in seconds
/// since `origin`. A Cluster's completion names no Machine and is not counted.
pub fn provisioned(log: &str, origin: jiff::Timestamp) -> BTreeMap<String, Provisioned> {
    let zone = jiff::tz::TimeZone::system();
    let origin_date = origin.to_zoned(zone.clone()).date();
    let mut seen: BTreeMap<String, Provisioned> = BTreeMap::new();
    for line in log.lines().filter(|l| l.contains(COMPLETED)) {
        let at = klog_time(line, &zone, origin_date);
        let (Some(at), Some(machine)) = (at, machine_of(line)) else {
            continue;
        };
        let since = at.duration_since(origin).as_secs_f64();
        seen.entry(machine.to_owned())
            .and_modify(|p| {
                p.first = p.first.min(since);
                p.lines += 1;
            })
            .or_insert(Provisioned {
                first: since,
                lines: 1,
            });
    }
    seen
}

/// The Machine a line is about (`Machine="namespace/name"`).
fn machine_of(line: &str) -> Option<&str> {
    let value = line.split_once(" Machine=\"")?.1.split_once('"')?.0;
    Some(value.rsplit_once('/').map_or(value, |(_, name)| name))
}

/// The time of a klog line (`I1207 11:59:07.359131 …`: month, day and time of day in `zone`),
/// in the year of `origin_date` (the next one for a line of January after an origin in
/// December).
fn klog_time(
    line: &str,
    zone: &jiff::tz::TimeZone,
    origin_date: jiff::civil::Date,
) -> Option<jiff::Timestamp> {
    let mut fields = line.get(1..)?.split_whitespace();
    let (date, time) = (fields.next()?, fields.next()?);
    let month: i8 = date.get(0..2)?.parse().ok()?;
    let day: i8 = date.get(2..4)?.parse().ok()?;
    let year = origin_date.year() + i16::from(month < origin_date.month());
    let time: jiff::civil::Time = time.parse().ok()?;
    let at = jiff::civil::date(year, month, day).to_datetime(time);
    zone.to_timestamp(at).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"I1207 11:59:07.359131   28395 cluster_controller_phases.go:193] "Infrastructure provider has completed provisioning" controller="cluster" controllerGroup="cluster.x-k8s.io" controllerKind="Cluster" Cluster="ns/bench-6" MetalStackCluster="ns/bench-6"
I1207 11:59:20.500000   28395 machine_controller_phases.go:301] "Infrastructure provider has completed provisioning" controller="machine" controllerGroup="cluster.x-k8s.io" controllerKind="Machine" Machine="ns/bench-6-worker-a" namespace="ns" MetalStackMachine="ns/bench-6-worker-a"
I1207 11:59:19.250000   28395 machine_controller_phases.go:301] "Infrastructure provider has completed provisioning" controller="machine" controllerGroup="cluster.x-k8s.io" controllerKind="Machine" Machine="ns/bench-6-worker-a" namespace="ns" MetalStackMachine="ns/bench-6-worker-a"
I1207 11:59:20.750000   28395 machine_controller_phases.go:301] "Infrastructure provider has completed provisioning" controller="machine" controllerGroup="cluster.x-k8s.io" controllerKind="Machine" Machine="ns/bench-6-worker-a" namespace="ns" MetalStackMachine="ns/bench-6-worker-a"
I1207 11:59:21.000000   28395 machine_controller.go:400] "Reconciling" controller="machine" Machine="ns/bench-6-worker-b"
I1207 11:59:22.000000   28395 machine_controller_phases.go:301] "Infrastructure provider has completed provisioning" controller="machine" controllerGroup="cluster.x-k8s.io" controllerKind="Machine" Machine="ns/bench-6-worker-b" namespace="ns" MetalStackMachine="ns/bench-6-worker-b"
"#;

    fn origin() -> jiff::Timestamp {
        let at = jiff::civil::date(2026, 12, 7).at(11, 59, 10, 0);
        at.to_zoned(jiff::tz::TimeZone::system())
            .expect("a local time")
            .timestamp()
    }

    #[test]
    fn each_machine_has_its_first_completion_and_their_count() {
        let seen = provisioned(LOG, origin());
        let a = seen.get("bench-6-worker-a").expect("worker a");
        assert!(
            (a.first - 9.25).abs() < 1e-6,
            "the earliest of three: {a:?}"
        );
        assert_eq!(a.lines, 3);
        let b = seen.get("bench-6-worker-b").expect("worker b");
        assert!((b.first - 12.0).abs() < 1e-6, "{b:?}");
        assert_eq!(b.lines, 1, "other lines of the Machine are not counted");
        assert_eq!(
            seen.len(),
            2,
            "the Cluster's completion is no Machine's: {seen:?}"
        );
    }

    #[test]
    fn a_line_of_january_after_an_origin_in_december_is_of_the_next_year() {
        let line = r#"I0101 00:00:01.000000   1 x.go:1] "Infrastructure provider has completed provisioning" controller="machine" Machine="ns/m""#;
        let origin = jiff::civil::date(2026, 12, 31).at(23, 59, 59, 0);
        let origin = origin
            .to_zoned(jiff::tz::TimeZone::system())
            .expect("a local time")
            .timestamp();
        let seen = provisioned(line, origin);
        let m = seen.get("m").expect("m");
        assert!((m.first - 2.0).abs() < 1e-6, "{m:?}");
    }
}
