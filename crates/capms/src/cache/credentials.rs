//! Each cluster's metal-api client: capms's own, or one made from the Secret its
//! MetalStackCluster names in spec.credentialsRef. A Secret is read again once its client is
//! older than [`REREAD`], so a rotated Secret is taken up without a restart; a client whose
//! Secret did not change is kept, with its connections. An API v2 project token is refreshed
//! once half its lifetime or less is left, and written back to its Secret: by the call that finds
//! it due, or by the keeper that looks every [`KEEPER_TICK`], so that a cluster whose objects
//! are not reconciled for a while (a long `--sync-period`) keeps a working token.

use super::credentials_secret::config_of;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use metal_api::Client;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a client made from a Secret serves before the Secret is read again.
pub const REREAD: Duration = Duration::from_secs(30);

/// How often the keeper looks for API v2 tokens due for refresh (a look without one costs no
/// call). metal-apiserver's tokens live 10 minutes or more.
const KEEPER_TICK: Duration = Duration::from_secs(5);

/// A Secret whose client nothing asked for in this long (its cluster deleted or moved away; a
/// live cluster's objects are reconciled every `--sync-period`) is no longer kept fresh.
const KEPT_WHILE_USED: SignedDuration = SignedDuration::from_secs(3600);

/// How long after a failed refresh (or write back) of a token the next is tried: not every
/// [`KEEPER_TICK`] while metal-apiserver refuses it.
const RETRY_AFTER_FAILURE: SignedDuration = SignedDuration::from_secs(30);

/// Why a cluster's credentials cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The apiserver did not answer the read: transient.
    #[error("reading the credentials {secret}: Kubernetes API: {source}")]
    Read {
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error("the credentials {secret} named in spec.credentialsRef does not exist")]
    Missing { secret: String },
    #[error("the credentials {secret} named in spec.credentialsRef: {detail}")]
    Invalid { secret: String, detail: String },
}

impl CredentialsError {
    /// Can a later read succeed without anyone changing anything?
    pub fn is_transient(&self) -> bool {
        matches!(self, CredentialsError::Read { .. })
    }
}

/// One Secret's client, as read last.
struct Made {
    read_at: Instant,
    /// When a caller other than the keeper last asked for the client.
    used: Timestamp,
    resource_version: Option<String>,
    client: Client,
    /// A refreshed API v2 token the client calls with, not yet written to the Secret.
    unwritten: Option<String>,
    /// When refreshing the token or writing it back last failed, unless it succeeded since.
    failed_at: Option<Timestamp>,
}

/// A Secret, by namespace and name.
type Key = (String, String);

/// capms's own metal-api client and those made from credentials Secrets, by namespace and name.
pub struct MetalClients {
    own: Client,
    kube: kube::Client,
    made: Mutex<HashMap<Key, Made>>,
    /// The Secrets whose token one caller is refreshing now; the others go on with the old one.
    refreshing: Mutex<HashSet<Key>>,
    /// One read of a Secret at a time: the reconciles that want its client meanwhile (all of a
    /// cluster's, at a burst of new machines) take what that read made.
    reading: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

impl MetalClients {
    pub fn new(own: Client, kube: kube::Client) -> MetalClients {
        MetalClients {
            own,
            kube,
            made: Mutex::default(),
            refreshing: Mutex::default(),
            reading: Mutex::default(),
        }
    }

    /// capms's own client: for clusters that name no credentials, and for what belongs to no
    /// cluster (a machine template's capacity).
    pub fn own(&self) -> &Client {
        &self.own
    }

    /// The client for credentials Secret `secret` in `namespace`, or capms's own without one.
    pub async fn of(
        &self,
        namespace: &str,
        secret: Option<&str>,
    ) -> Result<Client, CredentialsError> {
        let Some(name) = secret else {
            return Ok(self.own.clone());
        };
        let key = (namespace.to_owned(), name.to_owned());
        let client = self.read(&key).await?;
        let now = Timestamp::now();
        if let Some(made) = self.lock().get_mut(&key) {
            made.used = now;
        }
        self.keep_fresh(&key, &client, now).await;
        Ok(client)
    }

    /// Keeps the API v2 tokens of the Secrets in use fresh, every [`KEEPER_TICK`], until the
    /// process ends.
    pub(crate) fn spawn_token_keeper(self: &Arc<Self>) {
        let clients = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(KEEPER_TICK).await;
                clients.keep_all_fresh(Timestamp::now()).await;
            }
        });
    }

    /// Refreshes each token in use that is due (or refreshed and not yet written), the Secret
    /// read first (when its client is older than [`REREAD`]): a token someone else refreshed is
    /// taken up rather than refreshed again, and a Secret gone is let go.
    async fn keep_all_fresh(&self, now: Timestamp) {
        let due: Vec<Key> = self
            .lock()
            .iter()
            .filter(|(_, m)| now.duration_since(m.used) < KEPT_WHILE_USED)
            .filter(|(_, m)| m.unwritten.is_some() || m.client.token_refresh_due(now))
            .map(|(key, _)| key.clone())
            .collect();
        for key in due {
            match self.read(&key).await {
                Ok(client) => self.keep_fresh(&key, &client, now).await,
                Err(e) => tracing::debug!(error = %e, "keeping an API v2 token fresh"),
            }
        }
    }

    /// The client of Secret `key`: the one made before, while it is younger than [`REREAD`] or
    /// the Secret did not change, else one made from the Secret now.
    async fn read(&self, key: &Key) -> Result<Client, CredentialsError> {
        let (namespace, name) = (key.0.as_str(), key.1.as_str());
        let key = key.clone();
        if let Some(client) = self.young(&key) {
            return Ok(client);
        }
        let turn = {
            let mut reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
            reading.entry(key.clone()).or_default().clone()
        };
        let _turn = turn.lock().await;
        if let Some(client) = self.young(&key) {
            return Ok(client);
        }
        let origin = format!("Secret {namespace}/{name}");
        let read = Api::<Secret>::namespaced(self.kube.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|source| CredentialsError::Read {
                secret: origin.clone(),
                source,
            })?;
        let Some(secret) = read else {
            self.lock().remove(&key);
            return Err(CredentialsError::Missing { secret: origin });
        };
        let resource_version = secret.metadata.resource_version.clone();
        let mut made = self.lock();
        if let Some(kept) = made.get_mut(&key)
            && kept.resource_version == resource_version
        {
            kept.read_at = Instant::now();
            return Ok(kept.client.clone());
        }
        // The keeper's reads make no use: a changed Secret keeps when it was last used.
        let used = made.remove(&key).map_or_else(Timestamp::now, |m| m.used);
        let invalid = |detail: String| CredentialsError::Invalid {
            secret: origin.clone(),
            detail,
        };
        let config = config_of(&secret.data.unwrap_or_default(), &origin).map_err(invalid)?;
        let client = self
            .own
            .for_credentials(config)
            .map_err(|e| invalid(e.to_string()))?;
        made.insert(
            key,
            Made {
                read_at: Instant::now(),
                used,
                resource_version,
                client: client.clone(),
                unwritten: None,
                failed_at: None,
            },
        );
        Ok(client)
    }

    /// An API v2 token with half its lifetime or less left is refreshed and written
    /// back to its Secret by one caller; a token refreshed but not yet written is written again.
    /// A failure leaves the old token in use while it lasts, and is tried again once
    /// [`RETRY_AFTER_FAILURE`] has passed (a revoked or expired token is refused every time).
    async fn keep_fresh(&self, key: &Key, client: &Client, now: Timestamp) {
        let (unwritten, failed_at) = match self.lock().get(key) {
            Some(m) => (m.unwritten.clone(), m.failed_at),
            None => (None, None),
        };
        if unwritten.is_none() && !client.token_refresh_due(now) {
            return;
        }
        if failed_at.is_some_and(|t| now.duration_since(t) < RETRY_AFTER_FAILURE) {
            return;
        }
        if !self.refreshing().insert(key.clone()) {
            return;
        }
        let result = self.refresh(key, client, unwritten).await;
        self.refreshing().remove(key);
        if let Some(made) = self.lock().get_mut(key) {
            made.failed_at = result.is_err().then_some(now);
        }
        if let Err(e) = result {
            let secret = format!("{}/{}", key.0, key.1);
            tracing::warn!(%secret, error = %e, "keeping the API v2 token of the Secret fresh");
        }
    }

    async fn refresh(
        &self,
        key: &Key,
        client: &Client,
        unwritten: Option<String>,
    ) -> Result<(), String> {
        let token = match unwritten {
            Some(token) => token,
            None => client.refresh_token().await.map_err(|e| e.to_string())?,
        };
        let data = serde_json::json!({"data": {"token": ByteString(token.clone().into_bytes())}});
        let secrets = Api::<Secret>::namespaced(self.kube.clone(), &key.0);
        let written = secrets
            .patch(&key.1, &PatchParams::default(), &Patch::Merge(&data))
            .await;
        let mut made = self.lock();
        let kept = made.get_mut(key);
        match written {
            Ok(secret) => {
                if let Some(kept) = kept {
                    kept.resource_version = secret.metadata.resource_version;
                    kept.unwritten = None;
                }
                Ok(())
            }
            Err(e) => {
                if let Some(kept) = kept {
                    kept.unwritten = Some(token);
                }
                Err(format!("writing the refreshed token back: {e}"))
            }
        }
    }

    fn refreshing(&self) -> std::sync::MutexGuard<'_, HashSet<Key>> {
        self.refreshing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The client made from Secret `key` while it is younger than [`REREAD`].
    fn young(&self, key: &Key) -> Option<Client> {
        let made = self.lock();
        let made = made.get(key).filter(|m| m.read_at.elapsed() < REREAD)?;
        Some(made.client.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Made>> {
        // A panic elsewhere while the map was held leaves it whole: each entry is written at once.
        self.made
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metal_sim::v2::tokens::{MethodPermission, ProjectRole};
    use serde_json::{Value, json};

    const PROJECT: &str = "00000000-0000-0000-0000-000000000001";
    const REFRESH: &str = "/metalstack.api.v2.TokenService/Refresh";

    /// One credentials Secret `ns/creds` as an apiserver keeps it: its token and resourceVersion,
    /// and the patches written to it.
    #[derive(Default)]
    struct Stored {
        url: String,
        token: String,
        version: u64,
        patches: usize,
    }

    fn secret(stored: &Stored) -> Value {
        let b64 = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds", "namespace": "ns",
                         "resourceVersion": stored.version.to_string()},
            "data": {"apiVersion": b64("v2"), "url": b64(&stored.url),
                     "token": b64(&stored.token), "project": b64(PROJECT)}})
    }

    /// An apiserver serving `stored` to GET and merge PATCH.
    fn apiserver(stored: Arc<Mutex<Stored>>) -> kube::Client {
        let service = tower::service_fn(move |request: axum::http::Request<kube::client::Body>| {
            let stored = stored.clone();
            async move {
                let patch = request.method() == axum::http::Method::PATCH;
                let body =
                    axum::body::to_bytes(axum::body::Body::new(request.into_body()), 1 << 20);
                let body = body.await.unwrap_or_default();
                let mut stored = stored.lock().unwrap_or_else(|p| p.into_inner());
                if patch {
                    let patch: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let token = patch["data"]["token"].as_str().unwrap_or_default();
                    let token =
                        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, token);
                    stored.token = String::from_utf8(token.unwrap_or_default()).unwrap_or_default();
                    stored.version += 1;
                    stored.patches += 1;
                }
                let answer = secret(&stored).to_string().into_bytes();
                Ok::<_, std::convert::Infallible>(
                    axum::http::Response::builder()
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(answer))
                        .expect("a response"),
                )
            }
        });
        kube::Client::new(service, "default")
    }

    async fn simulator() -> (metal_sim::Sim, String) {
        crate::tls::install_default_provider();
        let inventory = metal_sim::inventory::Inventory::default_lab();
        let config = metal_sim::SimConfig {
            base_path: "/metal".into(),
            keys: metal_sim::HmacKeys::lab(),
            timings: metal_sim::Timings::fast(),
            rate_limit: metal_sim::DEFAULT_RATE_LIMIT,
        };
        let sim = metal_sim::Sim::new(&inventory, config).expect("the lab inventory");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        tokio::spawn(metal_sim::serve(
            listener,
            sim.clone(),
            std::future::pending(),
        ));
        (sim, url)
    }

    fn refreshes(sim: &metal_sim::Sim) -> u64 {
        let report = sim.stats().report();
        report
            .requests
            .iter()
            .filter(|r| r.route == REFRESH)
            .map(|r| r.count)
            .sum()
    }

    #[tokio::test]
    async fn the_keeper_refreshes_a_due_token_no_reconcile_asks_for_and_waits_after_a_refusal() {
        let (sim, url) = simulator().await;
        let roles = [(PROJECT.to_owned(), ProjectRole::Editor)].into();
        let permissions = vec![MethodPermission {
            subject: String::new(),
            methods: vec![REFRESH.into()],
        }];
        let lifetime = SignedDuration::from_mins(2);
        let start = Timestamp::now();
        let (first, jwt) = sim.tokens().mint("op", roles, permissions, lifetime, start);
        let stored = Arc::new(Mutex::new(Stored {
            url: url.clone(),
            token: jwt.clone(),
            version: 1,
            ..Default::default()
        }));
        let own = Client::new(metal_api::Config::new(
            url::Url::parse(&url).expect("url"),
            metal_api::Auth::None,
        ))
        .expect("a client");
        let clients = MetalClients::new(own, apiserver(stored.clone()));
        clients
            .of("ns", Some("creds"))
            .await
            .expect("the Secret's client");
        let after = |secs: i64| {
            start
                .saturating_add(SignedDuration::from_secs(secs))
                .expect("a time")
        };
        let token = || {
            stored
                .lock()
                .map(|s| (s.token.clone(), s.patches))
                .expect("stored")
        };

        clients.keep_all_fresh(after(50)).await;
        assert_eq!(
            (refreshes(&sim), token()),
            (0, (jwt.clone(), 0)),
            "refreshed with more than half its lifetime left"
        );

        clients.keep_all_fresh(after(70)).await;
        let (second, patches) = token();
        assert_eq!(
            (refreshes(&sim), patches),
            (1, 1),
            "not refreshed with less than half left"
        );
        assert_ne!(second, jwt, "the Secret still holds the first token");

        // The refreshed token revoked: refused, and not asked again for 30 s.
        let uuid = sim
            .tokens()
            .authenticate(Some(&format!("Bearer {second}")), Timestamp::now())
            .expect("a token")
            .map(|t| t.uuid)
            .expect("known");
        assert!(sim.tokens().revoke(&uuid, None) && first.uuid != uuid);
        clients.keep_all_fresh(after(200)).await;
        clients.keep_all_fresh(after(220)).await;
        assert_eq!(refreshes(&sim), 2, "refused and asked again within 30 s");
        clients.keep_all_fresh(after(231)).await;
        assert_eq!(refreshes(&sim), 3, "never asked again after a refusal");

        // Nothing asked for the client in an hour: its token is let be.
        clients.keep_all_fresh(after(3700)).await;
        assert_eq!(
            (refreshes(&sim), token().1),
            (3, 1),
            "an unused Secret's token kept fresh"
        );
    }
}
