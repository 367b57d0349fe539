//! Ports for the processes a test starts: free, below the kernel's ephemeral range, and apart
//! from those of test binaries running beside this one.

/// A free TCP port on 127.0.0.1, for a process the test starts. It is taken below the kernel's
/// ephemeral range (32768 and up), which the kernel hands out for `:0` and for every outgoing
/// connection: there, a port found free could be taken by another connection before the
/// process bound it (a Cluster API manager once failed with "address already in use"). This
/// process never hands out a port twice; test binaries running at once are given ranges of
/// their own (`CAPMS_TEST_PORTS`, see `port_range`).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let range = port_range();
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = rand::random_range(range.clone());
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
}

/// The ports [`free_port`] (and `tests/scripts/free_ports.py`) take: `CAPMS_TEST_PORTS`
/// (`LOW-HIGH`, high exclusive) when set, so that test binaries run side by side
/// (`tests/scripts/run-tests.sh`) never pick the same port; else 20000-32000.
fn port_range() -> std::ops::Range<u16> {
    let set = std::env::var("CAPMS_TEST_PORTS").ok();
    parse_port_range(set.as_deref()).unwrap_or_else(|e| panic!("{e}"))
}

/// Where test processes take ports when nothing narrows it: below the kernel's ephemeral range.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

fn parse_port_range(set: Option<&str>) -> Result<std::ops::Range<u16>, String> {
    let Some(set) = set else {
        return Ok(TEST_PORTS);
    };
    let parsed = set
        .split_once('-')
        .and_then(|(low, high)| Some((low.parse().ok()?, high.parse().ok()?)));
    match parsed {
        Some((low, high)) if low < high && TEST_PORTS.start <= low && high <= TEST_PORTS.end => {
            Ok(low..high)
        }
        _ => Err(format!(
            "CAPMS_TEST_PORTS={set:?}: expected LOW-HIGH within {}-{}, LOW < HIGH",
            TEST_PORTS.start, TEST_PORTS.end
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_port_range;

    #[test]
    fn test_ports_are_narrowed_only_within_the_range_below_the_ephemeral_ports() {
        assert_eq!(parse_port_range(None), Ok(20_000..32_000));
        assert_eq!(parse_port_range(Some("26000-32000")), Ok(26_000..32_000));
        for wrong in [
            "",
            "26000",
            "26000-",
            "26000-26000",
            "30000-26000",
            "1024-2000",
            "30000-40000",
        ] {
            let error = parse_port_range(Some(wrong)).expect_err(wrong);
            assert!(error.contains("within 20000-32000"), "{wrong}: {error}");
        }
    }
}
