//! The TLS server's properties: TLS 1.2 and 1.3 only, readiness only with certificates, and a
//! certificate swapped on disk served to the next connection.

use crate::support;
use metal_sim::inventory::Inventory;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::{CapmsManager, ControlPlane, RunningSim, eventually};

fn openssl_connect(port: u16, version_flag: &str) -> String {
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            version_flag,
            "-servername",
            "127.0.0.1",
            "-cipher",
            "DEFAULT:@SECLEVEL=0",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(super) fn served_serial(port: u16) -> String {
    let script = format!(
        "openssl s_client -connect 127.0.0.1:{port} -servername 127.0.0.1 </dev/null 2>/dev/null | openssl x509 -noout -serial"
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub(super) fn file_serial(cert: &Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(cert)
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "current_thread")]
async fn tls_server_needs_tls12_rotates_certificates_and_is_unready_without_them() {
    capms::tls::install_default_provider();
    let cp = ControlPlane::shared();
    let ns = cp.namespace("tls").await;
    let sim = RunningSim::start(Inventory::default_lab(), "/").await;
    let work = tempfile::tempdir().expect("temp dir");
    let cert_dir = work.path().join("certs");
    std::fs::create_dir_all(&cert_dir).expect("dir");
    let manager = CapmsManager::start("capms-tls", &ns.name, &sim.url, &cert_dir, work.path(), &[]);
    let (health, port) = (manager.health_port, manager.webhook_port);

    // No certificate yet: the pod must not take traffic.
    eventually("/readyz to answer", Duration::from_secs(120), || async {
        manager.readyz().await.map(|_| ())
    })
    .await;
    let body = reqwest::get(format!("http://127.0.0.1:{health}/readyz"))
        .await
        .expect("readyz")
        .text()
        .await
        .expect("body");
    assert_eq!(
        manager.readyz().await,
        Some(503),
        "unready until certificates load: {body}; files: {:?}; log:\n{}",
        std::fs::read_dir(&cert_dir).map(|d| d.count()).ok(),
        manager.process.log_tail()
    );
    cp.issue_serving_cert(&cert_dir);
    eventually("/readyz to turn ready", Duration::from_secs(10), || async {
        (manager.readyz().await == Some(200)).then_some(())
    })
    .await;

    // TLS 1.2 and 1.3 are served; TLS 1.1 and plain HTTP are not.
    for ok in ["-tls1_2", "-tls1_3"] {
        let out = openssl_connect(port, ok);
        assert!(
            out.contains("-----BEGIN CERTIFICATE-----"),
            "{ok} must work:\n{out}"
        );
    }
    let old = openssl_connect(port, "-tls1_1");
    assert!(
        !old.contains("-----BEGIN CERTIFICATE-----")
            && old.contains("no peer certificate available"),
        "TLS 1.1 must fail:\n{old}"
    );
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await;
    assert!(
        plain.is_err() || !plain.as_ref().is_ok_and(|r| r.status().is_success()),
        "plain HTTP is refused"
    );

    // A certificate swapped on disk is served to the next connection, without a restart.
    let first = served_serial(port);
    assert_eq!(first, file_serial(&cert_dir.join("tls.crt")));
    let next_dir = work.path().join("next");
    cp.issue_serving_cert(&next_dir);
    // Swap both files the way a rename-based writer does.
    for f in ["tls.key", "tls.crt"] {
        std::fs::copy(next_dir.join(f), cert_dir.join(format!("{f}.new"))).expect("copy");
        std::fs::rename(cert_dir.join(format!("{f}.new")), cert_dir.join(f)).expect("rename");
    }
    let second = served_serial(port);
    assert_ne!(second, first, "a new certificate after the swap");
    assert_eq!(second, file_serial(&next_dir.join("tls.crt")));
}
