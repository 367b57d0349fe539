//! The conversion webhook of a management control plane: capms's `/convert`, served from this
//! test process over TLS with a certificate of the control plane's CA. The CRDs point at it by
//! URL, as `make demo` points them at its manager: a local control plane has no cluster
//! network to reach a Service through. It stops when its control plane is dropped.

use super::*;

pub struct ConversionServer {
    handle: axum_server::Handle<std::net::SocketAddr>,
}

impl Drop for ConversionServer {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

impl ControlPlane {
    /// Starts the conversion webhook on a free loopback port and returns it with its base URL.
    pub(crate) fn start_conversion_server(&self) -> (ConversionServer, String) {
        capms::tls::install_default_provider();
        let certs = self.dir.join("conversion-certs");
        std::fs::create_dir_all(&certs).expect("certificate dir");
        self.issue_serving_cert(&certs);
        let port = free_port();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let handle = axum_server::Handle::new();
        let serving = handle.clone();
        let cert = capms::server::tls::ReloadingCert::new(&certs);
        std::thread::Builder::new()
            .name(format!("conversion-{port}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("conversion server runtime");
                let router = capms::conversion::review::router();
                let served = capms::server::serve_tls(addr, router, cert, serving);
                if let Err(e) = runtime.block_on(served) {
                    eprintln!("the conversion webhook on {addr} stopped: {e}");
                }
            })
            .expect("conversion server thread");
        let deadline = std::time::Instant::now() + crate::LOADED_MACHINE_WAIT;
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the conversion webhook did not listen on {addr} within {:?}",
                crate::LOADED_MACHINE_WAIT
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        (
            ConversionServer { handle },
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
