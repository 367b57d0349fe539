//! The one rustls crypto provider of the whole crate, chosen here and nowhere else.

use std::sync::Arc;

/// ring: the provider kube's client is built with, so only one is compiled in.
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs the provider as the process default (idempotent). `main` calls it first thing, so
/// any library that builds a TLS config through the default path gets the same provider.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client TLS config trusting the system's root certificates (and any extra PEM CAs).
pub fn client_config(extra_ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(pem) = extra_ca_pem {
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("CA bundle is not PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("CA certificate rejected: {e}"))?;
        }
    }
    rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
}
