//! The client's TLS: rustls with ring (the provider kube's client is built with, so a program
//! using both compiles one), trusting the system's roots and any extra CAs.

use rustls::pki_types::{CertificateDer, pem::PemObject};
use std::sync::Arc;

/// A client TLS config trusting the system's root certificates and the PEM CAs in `extra_ca_pem`.
pub fn client_config(extra_ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A system certificate rustls cannot use is skipped, as every other client does.
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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
}
