//! Typed async client for metal-api v1.

pub use super::config::{Auth, Config};
use super::error::{Error, decode_error_body};
use super::hmac;
use super::types::*;
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

impl Client {
    pub fn new(config: Config) -> Result<Client, Error> {
        let tls = crate::tls::client_config(config.ca_pem.as_deref()).map_err(Error::Config)?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(5)))
            .user_agent(concat!("capms/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Config(format!("building the HTTP client: {e}")))?;
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
        })
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
            let mut message = decode_error_body(&bytes);
            if let (401 | 403, Some(origin)) = (status.as_u16(), &self.origin) {
                message = format!("{message} (the credentials of {origin})");
            }
            return Err(Error::Api {
                endpoint,
                status: status.as_u16(),
                message,
            });
        }
        super::json::decode(&bytes).map_err(|e| Error::Decode {
            endpoint,
            detail: e.to_string(),
        })
    }

    fn transport_error(&self, endpoint: &'static str, e: reqwest::Error) -> Error {
        self.record(endpoint, 0);
        // A URL from a Secret is the Secret's: its error names the Secret, not the URL.
        let (via, e) = match &self.origin {
            Some(origin) => (format!(" (as {origin} gives it)"), e.without_url()),
            None => (String::new(), e),
        };
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

    pub async fn health(&self) -> Result<HealthResponse, Error> {
        self.get("health", "v1/health").await
    }

    pub async fn partitions(&self) -> Result<Vec<Partition>, Error> {
        self.list("partition_list", "v1/partition").await
    }

    pub async fn partition(&self, id: &str) -> Result<Partition, Error> {
        self.get("partition_get", &format!("v1/partition/{}", seg(id)))
            .await
    }

    pub async fn sizes(&self) -> Result<Vec<Size>, Error> {
        self.list("size_list", "v1/size").await
    }

    pub async fn size(&self, id: &str) -> Result<Size, Error> {
        self.get("size_get", &format!("v1/size/{}", seg(id))).await
    }

    pub async fn images(&self) -> Result<Vec<Image>, Error> {
        self.list("image_list", "v1/image").await
    }

    pub async fn image(&self, id: &str) -> Result<Image, Error> {
        self.get("image_get", &format!("v1/image/{}", seg(id)))
            .await
    }

    /// The image a name resolves to under metal-api's version rules.
    pub async fn image_latest(&self, id: &str) -> Result<Image, Error> {
        self.get("image_latest", &format!("v1/image/{}/latest", seg(id)))
            .await
    }

    pub async fn projects(&self) -> Result<Vec<Project>, Error> {
        self.list("project_list", "v1/project").await
    }

    pub async fn project(&self, id: &str) -> Result<Project, Error> {
        self.get("project_get", &format!("v1/project/{}", seg(id)))
            .await
    }

    pub async fn networks(&self) -> Result<Vec<Network>, Error> {
        self.list("network_list", "v1/network").await
    }

    pub async fn network(&self, id: &str) -> Result<Network, Error> {
        self.get("network_get", &format!("v1/network/{}", seg(id)))
            .await
    }

    pub async fn network_find(&self, req: &NetworkFindRequest) -> Result<Vec<Network>, Error> {
        self.find("network_find", "v1/network/find", req).await
    }

    pub async fn network_allocate(&self, req: &NetworkAllocateRequest) -> Result<Network, Error> {
        self.write(
            "network_allocate",
            Method::POST,
            "v1/network/allocate",
            Some(req),
        )
        .await
    }

    pub async fn network_free(&self, id: &str) -> Result<Network, Error> {
        self.write::<(), _>(
            "network_free",
            Method::DELETE,
            &format!("v1/network/free/{}", seg(id)),
            None,
        )
        .await
    }

    pub async fn ip(&self, address: &str) -> Result<Ip, Error> {
        self.get("ip_get", &format!("v1/ip/{}", seg(address))).await
    }

    pub async fn ip_find(&self, req: &IpFindRequest) -> Result<Vec<Ip>, Error> {
        self.find("ip_find", "v1/ip/find", req).await
    }

    pub async fn ip_allocate(&self, req: &IpAllocateRequest) -> Result<Ip, Error> {
        self.write("ip_allocate", Method::POST, "v1/ip/allocate", Some(req))
            .await
    }

    /// Allocates exactly `address`; 409 when it is taken.
    pub async fn ip_allocate_specific(
        &self,
        address: &str,
        req: &IpAllocateRequest,
    ) -> Result<Ip, Error> {
        self.write(
            "ip_allocate_specific",
            Method::POST,
            &format!("v1/ip/allocate/{}", seg(address)),
            Some(req),
        )
        .await
    }

    pub async fn ip_free(&self, address: &str) -> Result<Ip, Error> {
        self.write::<(), _>(
            "ip_free",
            Method::DELETE,
            &format!("v1/ip/free/{}", seg(address)),
            None,
        )
        .await
    }

    pub async fn machine(&self, id: &str) -> Result<Machine, Error> {
        self.get("machine_get", &format!("v1/machine/{}", seg(id)))
            .await
    }

    pub async fn machine_find(&self, req: &MachineFindRequest) -> Result<Vec<Machine>, Error> {
        self.machine_find_as(req).await
    }

    /// The machines `req` finds, each decoded as `R` instead of a whole [`Machine`]: a type
    /// holding part of the machine response (such as [`crate::MachineSummary`]), or one that
    /// decodes it leaving out what its reader does not need.
    pub async fn machine_find_as<R: DeserializeOwned>(
        &self,
        req: &MachineFindRequest,
    ) -> Result<Vec<R>, Error> {
        self.find("machine_find", "v1/machine/find", req).await
    }

    pub async fn machine_allocate(&self, req: &MachineAllocateRequest) -> Result<Machine, Error> {
        self.write(
            "machine_allocate",
            Method::POST,
            "v1/machine/allocate",
            Some(req),
        )
        .await
    }

    pub async fn machine_free(&self, id: &str) -> Result<Machine, Error> {
        self.write::<(), _>(
            "machine_free",
            Method::DELETE,
            &format!("v1/machine/{}/free", seg(id)),
            None,
        )
        .await
    }

    /// Sends a power action to the machine's BMC. Never retried: a second power cycle would
    /// reboot a machine that is already coming back.
    pub async fn machine_power(&self, id: &str, action: PowerAction) -> Result<Machine, Error> {
        let endpoint = action.endpoint();
        let path = format!("v1/machine/{}/power/{}", seg(id), action.segment());
        let body = serde_json::json!({});
        self.write(endpoint, Method::POST, &path, Some(&body)).await
    }

    /// Installs `imageid` on the machine again, keeping its allocation.
    pub async fn machine_reinstall(&self, id: &str, imageid: &str) -> Result<Machine, Error> {
        let body = MachineReinstallRequest {
            id: id.to_owned(),
            imageid: imageid.to_owned(),
            ..Default::default()
        };
        let path = format!("v1/machine/{}/reinstall", seg(id));
        self.write("machine_reinstall", Method::POST, &path, Some(&body))
            .await
    }

    pub async fn firewall(&self, id: &str) -> Result<Machine, Error> {
        self.get("firewall_get", &format!("v1/firewall/{}", seg(id)))
            .await
    }

    pub async fn firewall_find(&self, req: &MachineFindRequest) -> Result<Vec<Machine>, Error> {
        self.find("firewall_find", "v1/firewall/find", req).await
    }

    pub async fn firewall_allocate(&self, req: &FirewallCreateRequest) -> Result<Machine, Error> {
        self.write(
            "firewall_allocate",
            Method::POST,
            "v1/firewall/allocate",
            Some(req),
        )
        .await
    }
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
