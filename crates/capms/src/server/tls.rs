//! The webhook server's TLS: certificates read from `--webhook-cert-dir` (`tls.crt`, `tls.key`,
//! as cert-manager mounts them) and re-read when their content changes, checked at every new
//! connection. No file watch: kubelet swaps a Secret volume's `..data` symlink, which file-level
//! watches miss; reading two small files per admission connection costs nothing.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(
        "reading {path}: {source} (set --webhook-cert-dir to the directory holding tls.crt and tls.key)"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no usable PEM private key: {detail}")]
    BadKey { path: PathBuf, detail: String },
    /// Seen between the two renames of a file-by-file rotation.
    #[error(
        "{key} does not belong to the certificate in {cert}, or it does not parse (files mid-rotation?)"
    )]
    KeyMismatch { cert: PathBuf, key: PathBuf },
}

impl TlsError {
    pub fn category(&self) -> &'static str {
        match self {
            TlsError::Read { .. } => "tls_read",
            TlsError::NoCertificate { .. } => "tls_no_certificate",
            TlsError::BadKey { .. } => "tls_bad_key",
            TlsError::KeyMismatch { .. } => "tls_key_mismatch",
        }
    }
}

struct Loaded {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    key: Arc<CertifiedKey>,
}

/// Serves the certificate on disk, reloading it when the files change.
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<Option<Loaded>>,
    ready: AtomicBool,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.cert_path)
            .field("ready", &self.is_loaded())
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

impl ReloadingCert {
    pub fn new(cert_dir: &Path) -> Arc<ReloadingCert> {
        Arc::new(ReloadingCert {
            cert_path: cert_dir.join("tls.crt"),
            key_path: cert_dir.join("tls.key"),
            provider: crate::tls::crypto_provider(),
            loaded: Mutex::new(None),
            ready: AtomicBool::new(false),
        })
    }

    /// True once a certificate has been loaded (what `/readyz` reports).
    pub(crate) fn is_loaded(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Loads the files if they changed since the last load; the previous certificate stays in
    /// use when the new files are unreadable or half-written.
    pub fn refresh(&self) -> Result<Arc<CertifiedKey>, TlsError> {
        let cert_pem = read(&self.cert_path)?;
        let key_pem = read(&self.key_path)?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = loaded.as_ref()
            && l.cert_pem == cert_pem
            && l.key_pem == key_pem
        {
            return Ok(l.key.clone());
        }
        let key = Arc::new(self.parse(&cert_pem, &key_pem)?);
        if loaded.is_some() {
            tracing::info!(cert = %self.cert_path.display(), "webhook certificate changed on disk; serving the new one");
        }
        *loaded = Some(Loaded {
            cert_pem,
            key_pem,
            key: key.clone(),
        });
        self.ready.store(true, Ordering::SeqCst);
        Ok(key)
    }

    fn parse(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
            .filter_map(Result::ok)
            .collect();
        if certs.is_empty() {
            return Err(TlsError::NoCertificate {
                path: self.cert_path.clone(),
            });
        }
        let bad_key = |detail: String| TlsError::BadKey {
            path: self.key_path.clone(),
            detail,
        };
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad_key(e.to_string()))?;
        let signing = self
            .provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| bad_key(e.to_string()))?;
        let key = CertifiedKey::new(certs, signing);
        // A pair that does not match (or a certificate that does not parse) would fail every
        // handshake, so the last good pair stays in use. Only a key whose public half the
        // provider cannot tell is taken on trust.
        match key.keys_match() {
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
                Ok(key)
            }
            Err(_) => Err(TlsError::KeyMismatch {
                cert: self.cert_path.clone(),
                key: self.key_path.clone(),
            }),
        }
    }

    /// The server config: TLS 1.2 and 1.3 only, HTTP/2 and HTTP/1.1, this resolver.
    pub(crate) fn server_config(self: &Arc<Self>) -> Result<rustls::ServerConfig, rustls::Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match self.refresh() {
            Ok(key) => Some(key),
            Err(e) => {
                tracing::warn!(error = %e, category = e.category(), "webhook certificate unavailable");
                // Keep serving the last good certificate, if any.
                let loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
                loaded.as_ref().map(|l| l.key.clone())
            }
        }
    }
}
