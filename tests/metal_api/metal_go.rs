//! metal-stack's own Go client, metal-go (what metalctl and the Go Cluster API provider use),
//! against the simulator: `tests/metalgo` lists, describes, finds, allocates and frees every
//! entity through it, power-cycles and reinstalls a machine and reads its BMC, exactly as those
//! programs call it. This is the test that catches the simulator speaking capms' dialect instead
//! of metal-api's.

use crate::support;

use metal_sim::inventory::Inventory;
use metal_sim::stats::UNMATCHED;
use std::process::Stdio;
use std::time::Duration;
use support::RunningSim;

/// Builds (once, cached outside the repository) and returns the metal-go check program.
fn metalgo_check() -> std::path::PathBuf {
    support::build(&["metalgo"])["CAPMS_METALGO"].clone().into()
}

#[tokio::test]
async fn metal_go_lists_describes_allocates_and_frees_everything() {
    let binary = tokio::task::spawn_blocking(metalgo_check)
        .await
        .expect("build");
    let sim = RunningSim::start(Inventory::default_lab(), "/metal").await;
    let run = tokio::process::Command::new(&binary)
        .env("METAL_API_URL", &sim.url)
        .env("METAL_API_HMAC", "metal-edit")
        .env("METAL_API_HMAC_AUTH_TYPE", "Metal-Edit")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("metalgo-check finishes within 2 minutes")
        .expect("metalgo-check runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "metal-go against the simulator:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.ends_with(" passed, 0 failed"), "summary: {summary}");
    let passed: u32 = summary
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed >= 60, "only {passed} checks ran");

    // Every request metal-go made hit a metal-api route, and none was refused as unreadable.
    let report = sim.sim.stats().report();
    let unmatched: Vec<_> = report
        .requests
        .iter()
        .filter(|r| r.route == UNMATCHED)
        .collect();
    assert!(
        unmatched.is_empty(),
        "metal-go called routes the simulator does not serve: {unmatched:?}"
    );
    let refused: Vec<_> = report
        .requests
        .iter()
        .filter(|r| r.status == 400 || r.status == 405)
        .collect();
    assert!(refused.is_empty(), "metal-go requests refused: {refused:?}");
    for route in [
        "/v1/machine/allocate",
        "/v1/firewall/allocate",
        "/v1/network/allocate",
        "/v1/machine/{id}/free",
        "/v1/machine/{id}/power/cycle",
        "/v1/machine/{id}/reinstall",
        "/v1/machine/ipmi/find",
    ] {
        assert!(
            report
                .requests
                .iter()
                .any(|r| r.route == route && r.status < 300),
            "metal-go never succeeded on {route}: {:?}",
            report.requests
        );
    }
}
