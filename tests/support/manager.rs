//! A `capms manager` process of a test.

use super::*;

/// A `capms manager` process of a test, its webhooks on 127.0.0.1.
pub struct CapmsManager {
    pub process: ChildProcess,
    pub webhook_port: u16,
    pub health_port: u16,
    pub metrics_port: u16,
}

impl CapmsManager {
    /// Starts `capms manager` for `namespace` against the shared control plane and `metal_api_url`,
    /// serving webhooks with the certificate in `cert_dir`.
    pub fn start(
        name: &str,
        namespace: &str,
        metal_api_url: &str,
        cert_dir: &Path,
        work: &Path,
        extra: &[String],
    ) -> CapmsManager {
        let cp = ControlPlane::shared();
        let (webhook_port, health_port, metrics_port) = (free_port(), free_port(), free_port());
        let mut args = vec![
            "manager".to_owned(),
            format!("--kubeconfig={}", cp.kubeconfig.display()),
            format!("--namespace={namespace}"),
            "--webhook-host=127.0.0.1".into(),
            format!("--webhook-port={webhook_port}"),
            format!("--webhook-cert-dir={}", cert_dir.display()),
            format!("--health-addr=127.0.0.1:{health_port}"),
            format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            "--metrics-secure=false".into(),
        ];
        args.extend(extra.iter().cloned());
        let process = ChildProcess::spawn(
            name,
            Path::new(env!("CARGO_BIN_EXE_capms")),
            &args,
            &[
                ("METAL_API_URL", metal_api_url),
                ("METAL_API_HMAC", "metal-edit"),
                ("RUST_LOG", "info"),
            ],
            work,
        );
        CapmsManager {
            process,
            webhook_port,
            health_port,
            metrics_port,
        }
    }

    /// The status `/readyz` answers with, if it answers.
    pub async fn readyz(&self) -> Option<u16> {
        reqwest::get(format!("http://127.0.0.1:{}/readyz", self.health_port))
            .await
            .ok()
            .map(|r| r.status().as_u16())
    }

    pub async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.readyz().await != Some(200) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "capms not ready after 30 s; log:\n{}",
                self.process.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
