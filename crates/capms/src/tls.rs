//! The one rustls crypto provider of the whole process, chosen here and nowhere else.

use std::sync::Arc;

/// ring: the provider kube's client and the metal-api client are built with, so only one is
/// compiled in.
pub(crate) fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs the provider as the process default (idempotent). `main` calls it first thing, so
/// any library that builds a TLS config through the default path gets the same provider.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
