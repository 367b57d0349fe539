//! metal-api's machines as a table, for `capms metal machines`.

use super::types::Machine;
use std::fmt::Write;

/// One line per machine: id, partition, size, rack, allocation, last event, liveliness, IPs.
pub fn machines(machines: &[Machine]) -> String {
    let mut out = format!(
        "{:<38} {:<10} {:<14} {:<8} {:<28} {:<20} {:<9} IPS\n",
        "ID", "PARTITION", "SIZE", "RACK", "ALLOCATION", "LAST EVENT", "LIVE"
    );
    for m in machines {
        let allocation = m
            .allocation
            .as_ref()
            .map(|a| format!("{} ({})", a.hostname, a.role))
            .unwrap_or_else(|| "-".into());
        let ips: Vec<String> = m
            .allocation
            .iter()
            .flat_map(|a| a.networks.iter().flat_map(|n| n.ips.clone()))
            .collect();
        let _ = writeln!(
            out,
            "{:<38} {:<10} {:<14} {:<8} {:<28} {:<20} {:<9} {}",
            m.id,
            m.partition.as_ref().map(|p| p.id.as_str()).unwrap_or("-"),
            m.size.as_ref().map(|s| s.id.as_str()).unwrap_or("-"),
            m.rackid,
            allocation,
            m.last_event().unwrap_or("-"),
            m.liveliness,
            ips.join(",")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_machine_shows_dashes() {
        let table = machines(&[Machine {
            id: "m1".into(),
            ..Default::default()
        }]);
        let row = table.lines().nth(1).unwrap_or_default();
        assert!(row.starts_with("m1 "), "{row}");
        assert!(row.contains(" - "), "{row}");
    }
}
