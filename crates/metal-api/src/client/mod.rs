//! Typed async client for metal-api v1.

pub use super::config::{Auth, Config};
use super::error::{Error, decode_error_body};
use super::hmac;
use super::v2;

mod endpoints;
use rand::Rng;
use reqwest::Method;
use serde::{Serialize, de::DeserializeOwned};
use std::time::Duration;
use url::Url;

/// Told of every call a [`Client`] makes: a program's metrics, without this crate knowing them.
pub trait CallObserver: Send + Sync {
    /// A call to `endpoint` is about to be sent.
    fn before(&self, _endpoint: &'static str) {}

    /// `endpoint` is the route as metal-api's spec writes it (`POST /v1/machine/find`); `status`
    /// the HTTP status, 0 when no answer came.
    fn observe(&self, endpoint: &str, status: u16);
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    auth: Auth,
    timeout: Duration,
    read_attempts: u32,
    observer: Option<std::sync::Arc<dyn CallObserver>>,
    origin: Option<String>,
    /// Set: every call goes through metal-stack's API v2.
    v2: Option<std::sync::Arc<v2::Backend>>,
    /// The last call its credentials were refused at, until a later call is answered; shared
    /// by its clones.
    refusal: std::sync::Arc<std::sync::Mutex<Option<Refusal>>>,
}

/// A call metal-api refused the credentials at (401, 403), and what it said.
#[derive(Clone, Debug)]
struct Refusal {
    endpoint: &'static str,
    status: u16,
    message: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let base = match &self.origin {
            Some(origin) => origin.as_str(),
            None => self.base.as_str(),
        };
        f.debug_struct("metal::Client")
            .field("base", &base)
            .field("auth", &self.auth)
            .finish()
    }
}

/// The connections to one metal-api kept open between calls.
const IDLE_CONNECTIONS: usize = 4;

impl Client {
    pub fn new(config: Config) -> Result<Client, Error> {
        let tls = crate::tls::client_config(config.ca_pem.as_deref()).map_err(Error::Config)?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(5)))
            // Each idle connection keeps the block it last read a listing into (up to about
            // 400 kB); a burst of calls opens more than the calls that follow it need.
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .user_agent(concat!("capms/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Config(format!("building the HTTP client: {e}")))?;
        let v2 = match config.v2_project {
            Some(project) => Some(std::sync::Arc::new(v2_backend(
                &config.url,
                &config.auth,
                http.clone(),
                project,
            )?)),
            None => None,
        };
        let mut base = config.url;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        Ok(Client {
            http,
            base,
            auth: config.auth,
            timeout: config.timeout,
            read_attempts: config.read_attempts.max(1),
            observer: None,
            origin: config.origin,
            v2,
            refusal: Default::default(),
        })
    }

    /// The error of the last call its credentials were refused at (an expired, revoked or
    /// foreign token, a wrong key), unless a later call was answered: what a cluster whose own
    /// calls all come from caches shows of credentials that stopped working.
    pub fn refused(&self) -> Option<Error> {
        let refusal = self.refusal.lock().unwrap_or_else(|p| p.into_inner());
        refusal.clone().map(|r| Error::Api {
            endpoint: r.endpoint,
            status: r.status,
            message: r.message,
        })
    }

    /// Remembers a refusal of the credentials, and forgets it once a call is answered; names
    /// the credentials' origin in a refusal's message.
    fn noted<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        let mut refusal = self.refusal.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(answer) => {
                *refusal = None;
                Ok(answer)
            }
            Err(Error::Api {
                endpoint,
                status: status @ (401 | 403),
                mut message,
            }) => {
                if let Some(origin) = &self.origin {
                    message = format!("{message} (the credentials of {origin})");
                }
                *refusal = Some(Refusal {
                    endpoint,
                    status,
                    message: message.clone(),
                });
                Err(Error::Api {
                    endpoint,
                    status,
                    message,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Does it call through metal-stack's API v2?
    pub fn is_v2(&self) -> bool {
        self.v2.is_some()
    }

    /// Through API v2, the project its token is for; None through v1.
    pub fn v2_project(&self) -> Option<&str> {
        self.v2.as_ref().map(|v2| v2.project.as_str())
    }

    /// Through API v2, the share of the token's calls per minute still to be had (0 to 1); None
    /// through v1, which counts no calls.
    pub fn budget_left(&self) -> Option<f64> {
        self.v2.as_ref().map(|v2| v2.api.budget_left())
    }

    /// Through API v2: is half the project token's lifetime or less left at `now`?
    pub fn token_refresh_due(&self, now: jiff::Timestamp) -> bool {
        self.v2
            .as_ref()
            .is_some_and(|v2| v2.api.token().refresh_due(now))
    }

    /// Through API v2: a new project token (`TokenService/Refresh`), called with from now on;
    /// its text, to be kept where the old one came from.
    pub async fn refresh_token(&self) -> Result<String, Error> {
        let Some(v2) = &self.v2 else {
            return Err(Error::Config("only an API v2 token is refreshed".into()));
        };
        let refresh = async {
            let token = v2.api.refresh().await?;
            Ok(token.secret().to_owned())
        };
        self.via_v2("token_refresh", refresh).await
    }

    /// `call`, made through API v2, told to the observer and read as `endpoint`'s v1 error.
    async fn via_v2<T>(
        &self,
        endpoint: &'static str,
        call: impl std::future::Future<Output = v2::Result<T>>,
    ) -> Result<T, Error> {
        if let Some(o) = &self.observer {
            o.before(endpoint);
        }
        let result = call
            .await
            .map_err(|f| f.into_error(endpoint, self.origin.as_deref()));
        let status = match &result {
            Ok(_) => 200,
            Err(e) => e.status().unwrap_or(0),
        };
        self.record(endpoint, status);
        self.noted(result)
    }

    /// A client for other credentials (`config`) that tells this one's observer of its calls.
    pub fn for_credentials(&self, config: Config) -> Result<Client, Error> {
        let mut client = Client::new(config)?;
        client.observer = self.observer.clone();
        Ok(client)
    }

    /// Tells `observer` of every call from now on.
    pub fn with_observer(mut self, observer: std::sync::Arc<dyn CallObserver>) -> Client {
        self.observer = Some(observer);
        self
    }

    fn record(&self, endpoint: &str, status: u16) {
        if let Some(o) = &self.observer {
            o.observe(endpoint, status);
        }
    }

    pub fn base_url(&self) -> &Url {
        &self.base
    }

    async fn call<B: Serialize, R: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        method: Method,
        path: &str,
        body: Option<&B>,
        read: bool,
    ) -> Result<R, Error> {
        let attempts = if read { self.read_attempts } else { 1 };
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.call_once(endpoint, method.clone(), path, body).await {
                Err(e) if e.is_transient() && attempt < attempts => {
                    // Jittered exponential backoff: 100 ms, 200 ms, … plus up to 100% jitter.
                    let base = 100u64 << (attempt - 1).min(6);
                    let delay = base + rand::rng().random_range(0..=base);
                    tracing::debug!(endpoint, attempt, delay_ms = delay, error = %e, "retrying metal-api read");
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                result => return result,
            }
        }
    }

    async fn call_once<B: Serialize, R: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<R, Error> {
        let url = self
            .base
            .join(path)
            .map_err(|e| Error::Config(format!("cannot join {path:?} to {}: {e}", self.base)))?;
        let mut request = self
            .http
            .request(method.clone(), url)
            .header("Accept", "application/json");
        match &self.auth {
            Auth::Hmac { key, auth_type } => {
                for (name, value) in
                    hmac::signed_headers(key.as_bytes(), *auth_type, method.as_str())
                {
                    request = request.header(name, value);
                }
            }
            Auth::Bearer(token) => {
                request = request.header("Authorization", format!("Bearer {token}"))
            }
            Auth::None => {}
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(o) = &self.observer {
            o.before(endpoint);
        }
        let started = std::time::Instant::now();
        let response = request
            .send()
            .await
            .map_err(|e| self.transport_error(endpoint, e))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(endpoint, e))?;
        tracing::debug!(
            endpoint,
            status = status.as_u16(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "metal-api call"
        );
        self.record(endpoint, status.as_u16());
        if !status.is_success() {
            return self.noted(Err(Error::Api {
                endpoint,
                status: status.as_u16(),
                message: decode_error_body(&bytes),
            }));
        }
        let answer = super::json::decode(&bytes).map_err(|e| Error::Decode {
            endpoint,
            via: crate::error::via(self.origin.as_deref()),
            detail: e.to_string(),
        });
        self.noted(answer)
    }

    fn transport_error(&self, endpoint: &'static str, e: reqwest::Error) -> Error {
        self.record(endpoint, 0);
        let (via, e) = crate::error::as_given_by(self.origin.as_deref(), e);
        if e.is_timeout() {
            Error::Timeout {
                endpoint,
                via,
                timeout: self.timeout,
            }
        } else {
            Error::Transport {
                endpoint,
                via,
                source: e,
            }
        }
    }

    async fn get<R: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        path: &str,
    ) -> Result<R, Error> {
        self.call::<(), R>(endpoint, Method::GET, path, None, true)
            .await
    }

    async fn find<B: Serialize, R: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        path: &str,
        body: &B,
    ) -> Result<R, Error> {
        self.call(endpoint, Method::POST, path, Some(body), true)
            .await
    }

    async fn write<B: Serialize, R: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<R, Error> {
        self.call(endpoint, method, path, body, false).await
    }

    /// Null lists (metal-api returns `null` for some empty collections) become empty.
    async fn list<R: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        path: &str,
    ) -> Result<Vec<R>, Error> {
        Ok(self
            .get::<Option<Vec<R>>>(endpoint, path)
            .await?
            .unwrap_or_default())
    }
}

/// The API v2 backend of a client whose `url` is a metal-apiserver's and `auth` a project token.
fn v2_backend(
    url: &Url,
    auth: &Auth,
    http: reqwest::Client,
    project: String,
) -> Result<v2::Backend, Error> {
    let Auth::Bearer(token) = auth else {
        return Err(Error::Config(
            "API v2 takes a project token, not an HMAC key".into(),
        ));
    };
    let token = metalstack_api::Token::parse(token)
        .map_err(|e| Error::Config(format!("the API v2 token: {e}")))?;
    let api = metalstack_api::Client::new(url.as_str(), http, token);
    Ok(v2::Backend { api, project })
}

/// Percent-encodes one path segment, so ids cannot change the path.
fn seg(id: &str) -> String {
    url::form_urlencoded::byte_serialize(id.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_path_comes_from_the_url() {
        let client = Client::new(Config::new(
            Url::parse("http://127.0.0.1:8080/metal").expect("url"),
            Auth::None,
        ))
        .expect("client");
        assert_eq!(
            client.base_url().join("v1/machine").expect("join").as_str(),
            "http://127.0.0.1:8080/metal/v1/machine"
        );
        let client = Client::new(Config::new(
            Url::parse("http://127.0.0.1:8080").expect("url"),
            Auth::None,
        ))
        .expect("client");
        assert_eq!(
            client.base_url().join("v1/machine").expect("join").as_str(),
            "http://127.0.0.1:8080/v1/machine"
        );
    }

    #[test]
    fn ids_cannot_escape_their_segment() {
        assert_eq!(seg("../admin"), "..%2Fadmin");
        assert_eq!(seg("10.0.0.1"), "10.0.0.1");
    }
}
