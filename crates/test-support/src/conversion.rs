//! Webhooks served from this test process over TLS, foremost the conversion webhook of a
//! management control plane (capms's `/convert`). The CRDs point at it by URL, as `make demo`
//! points them at its manager: a local control plane has no cluster network to reach a Service
//! through. It stops when its control plane is dropped.

use super::*;

/// A webhook served from this test process over TLS, with a certificate of its control plane's
/// CA; stops when dropped.
pub struct WebhookServer {
    handle: axum_server::Handle<std::net::SocketAddr>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

impl ControlPlane {
    /// Starts the conversion webhook on a free loopback port and returns it with its base URL.
    pub(crate) fn start_conversion_server(&self) -> (WebhookServer, String) {
        self.serve_webhook("conversion", capms::conversion::review::router())
    }

    /// Serves `router` on a free loopback port, on a thread of its own (so it answers whatever
    /// the test's runtime is doing); returns the server and its base URL once it listens.
    pub(crate) fn serve_webhook(
        &self,
        label: &str,
        router: axum::Router,
    ) -> (WebhookServer, String) {
        capms::tls::install_default_provider();
        let certs = self.dir.join(format!("{label}-certs"));
        std::fs::create_dir_all(&certs).expect("certificate dir");
        self.issue_serving_cert(&certs);
        let port = free_port();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let handle = axum_server::Handle::new();
        let serving = handle.clone();
        let cert = capms::server::tls::ReloadingCert::new(&certs);
        std::thread::Builder::new()
            .name(format!("{label}-{port}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("webhook server runtime");
                let served = capms::server::serve_tls(addr, router, cert, serving);
                if let Err(e) = runtime.block_on(served) {
                    eprintln!("the webhook on {addr} stopped: {e}");
                }
            })
            .expect("webhook server thread");
        let deadline = std::time::Instant::now() + crate::LOADED_MACHINE_WAIT;
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the webhook did not listen on {addr} within {:?}",
                crate::LOADED_MACHINE_WAIT
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        (
            WebhookServer { handle },
            format!("https://127.0.0.1:{port}"),
        )
    }

    /// Installs (or upgrades to) capms's CRDs, their conversion webhook at this control plane's
    /// conversion server, and waits until they are established.
    pub fn install_capms_crds(&self) {
        let base = self
            .conversion_url
            .as_deref()
            .expect("a control plane with a conversion server");
        let crds = capms::api::crds_converting_at(base, &self.ca_pem());
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": crds});
        let file = self.dir.join("capms-crds.json");
        std::fs::write(&file, serde_json::to_vec(&list).expect("json")).expect("write CRDs");
        self.apply(&file);
        self.wait_crds_established();
    }
}
