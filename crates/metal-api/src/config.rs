//! How a [`crate::Client`] reaches metal-api: its URL, credentials, timeout and retries, from
//! code or from the environment.

use super::error::Error;
use super::hmac::AuthType;
use std::time::Duration;
use url::Url;

/// How the client authenticates.
#[derive(Clone)]
pub enum Auth {
    Hmac { key: String, auth_type: AuthType },
    Bearer(String),
    None,
}

impl std::fmt::Debug for Auth {
    // Keys and tokens never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Hmac { auth_type, .. } => write!(f, "Hmac({})", auth_type.scheme()),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::None => f.write_str("None"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    /// metal-api URL; its path is the base path (`http://api/metal` → `/metal/v1/...`).
    pub url: Url,
    pub auth: Auth,
    /// Upper bound for one request, connection included.
    pub timeout: Duration,
    /// Attempts for reads (GET and find); writes are never retried, since no metal-api allocate
    /// call is idempotent.
    pub read_attempts: u32,
    /// Extra CA certificates (PEM) to trust for an HTTPS metal-api.
    pub ca_pem: Option<Vec<u8>>,
    /// Where the credentials come from (`Secret ns/name`), named when metal-api refuses them.
    pub origin: Option<String>,
    /// Set: `url` is a metal-apiserver's, `auth` a project token (Bearer), and every call goes
    /// through metal-stack's API v2 in this project.
    pub v2_project: Option<String>,
}

impl Config {
    pub fn new(url: Url, auth: Auth) -> Config {
        Config {
            url,
            auth,
            timeout: Duration::from_secs(10),
            read_attempts: 3,
            ca_pem: None,
            origin: None,
            v2_project: None,
        }
    }

    /// Reads `METAL_API_URL`, `METAL_API_HMAC`, `METAL_API_HMAC_AUTH_TYPE` (default Metal-Edit)
    /// and, without an HMAC key, `METAL_API_TOKEN`.
    pub fn from_env() -> Result<Config, Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let url =
            var("METAL_API_URL").ok_or_else(|| Error::Config("METAL_API_URL is not set".into()))?;
        let url = Url::parse(&url)
            .map_err(|e| Error::Config(format!("METAL_API_URL {url:?} is not a URL: {e}")))?;
        let auth = match (var("METAL_API_HMAC"), var("METAL_API_TOKEN")) {
            (Some(key), _) => {
                let auth_type = match var("METAL_API_HMAC_AUTH_TYPE") {
                    Some(t) => t.parse().map_err(|e: String| {
                        Error::Config(format!("METAL_API_HMAC_AUTH_TYPE: {e}"))
                    })?,
                    None => AuthType::Edit,
                };
                Auth::Hmac { key, auth_type }
            }
            (None, Some(token)) => Auth::Bearer(token),
            (None, None) => {
                return Err(Error::Config(
                    "set METAL_API_HMAC (or METAL_API_TOKEN)".into(),
                ));
            }
        };
        Ok(Config::new(url, auth))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let auth = Auth::Hmac {
            key: "super-secret".into(),
            auth_type: AuthType::Edit,
        };
        assert!(!format!("{auth:?}").contains("super-secret"));
        assert!(!format!("{:?}", Auth::Bearer("tok".into())).contains("tok"));
    }
}
