//! Each cluster's metal-api client: capms's own, or one made from the Secret its
//! MetalStackCluster names in spec.credentialsRef. A Secret is read again once its client is
//! older than [`REREAD`], so a rotated Secret is taken up without a restart; a client whose
//! Secret did not change is kept, with its connections. An API v2 project token is refreshed
//! once half its lifetime or less is left, and written back to its Secret.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use metal_api::hmac::AuthType;
use metal_api::{Auth, Client, Config};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use url::Url;

/// How long a client made from a Secret serves before the Secret is read again.
pub const REREAD: Duration = Duration::from_secs(30);

/// What a credentials Secret holds, for error messages.
const SHAPE: &str = "a credentials Secret holds `url`, and `hmac` (with `hmacAuthType`: \
                     Metal-View, Metal-Edit or Metal-Admin; default Metal-Edit) or `token`, \
                     and optionally `caBundle` (PEM); for metal-apiserver (`apiVersion`: v2; \
                     default v1) its `url`, a project `token` and that `project`";

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
    resource_version: Option<String>,
    client: Client,
    /// A refreshed API v2 token the client calls with, not yet written to the Secret.
    unwritten: Option<String>,
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
        self.keep_fresh(&key, &client).await;
        Ok(client)
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
        made.remove(&key);
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
                resource_version,
                client: client.clone(),
                unwritten: None,
            },
        );
        Ok(client)
    }

    /// An API v2 token with half its lifetime or less left is refreshed and written
    /// back to its Secret by one caller; a token refreshed but not yet written is written again.
    /// A failure leaves the old token in use while it lasts, and is tried again by a later call.
    async fn keep_fresh(&self, key: &Key, client: &Client) {
        let unwritten = self.lock().get(key).and_then(|m| m.unwritten.clone());
        if unwritten.is_none() && !client.token_refresh_due(jiff::Timestamp::now()) {
            return;
        }
        if !self.refreshing().insert(key.clone()) {
            return;
        }
        let result = self.refresh(key, client, unwritten).await;
        self.refreshing().remove(key);
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

/// The client configuration a credentials Secret's `data` describes; the error names the key
/// that is wrong and what the Secret should hold. `origin` names the Secret in metal-api's
/// refusals.
pub(crate) fn config_of(
    data: &BTreeMap<String, ByteString>,
    origin: &str,
) -> Result<Config, String> {
    let text = |key: &str| -> Result<Option<String>, String> {
        match data.get(key) {
            None => Ok(None),
            Some(bytes) => match std::str::from_utf8(&bytes.0) {
                Ok(t) if t.trim().is_empty() => Ok(None),
                Ok(t) => Ok(Some(t.trim().to_owned())),
                Err(_) => Err(format!("`{key}` is not UTF-8 text; {SHAPE}")),
            },
        }
    };
    let url = text("url")?.ok_or_else(|| format!("it holds no `url`; {SHAPE}"))?;
    let url = Url::parse(&url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| format!("`url` is not an http or https URL; {SHAPE}"))?;
    let (auth, v2_project) = match text("apiVersion")?.as_deref() {
        None | Some("v1") => {
            let auth = v1_auth(text("hmac")?, text("token")?, text("hmacAuthType")?)?;
            (auth, None)
        }
        Some("v2") => {
            let (token, project) = v2_auth(text("token")?, text("project")?)?;
            (token, Some(project))
        }
        Some(other) => {
            return Err(format!(
                "`apiVersion` {other:?} is not one of v1, v2; {SHAPE}"
            ));
        }
    };
    let mut config = Config::new(url, auth);
    config.v2_project = v2_project;
    config.ca_pem = data.get("caBundle").map(|b| b.0.clone());
    config.origin = Some(origin.to_owned());
    Ok(config)
}

/// metal-api's credentials: an HMAC key (Metal-Edit unless `hmacAuthType` says otherwise) or,
/// without one, a bearer token.
fn v1_auth(
    hmac: Option<String>,
    token: Option<String>,
    auth_type: Option<String>,
) -> Result<Auth, String> {
    match (hmac, token) {
        (Some(key), _) => {
            let auth_type = match auth_type {
                Some(t) => t
                    .parse::<AuthType>()
                    .map_err(|e| format!("`hmacAuthType`: {e}"))?,
                None => AuthType::Edit,
            };
            Ok(Auth::Hmac { key, auth_type })
        }
        (None, Some(token)) => Ok(Auth::Bearer(token)),
        (None, None) => Err(format!("it holds neither `hmac` nor `token`; {SHAPE}")),
    }
}

/// metal-apiserver's credentials (API v2): a project token and its project. v1's `hmac` and
/// `hmacAuthType` are left unread: a Secret moved from v1 by `kubectl apply` keeps the keys its
/// new manifest leaves out.
fn v2_auth(token: Option<String>, project: Option<String>) -> Result<(Auth, String), String> {
    let token = token.ok_or_else(|| format!("it holds no `token`; {SHAPE}"))?;
    let project = project
        .filter(|p| p.len() == 36 && p.chars().all(|c| c.is_ascii_hexdigit() || c == '-'))
        .ok_or_else(|| format!("`project` is not a project's UUID; {SHAPE}"))?;
    Ok((Auth::Bearer(token), project))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        match config_of(&data(pairs), "Secret ns/creds") {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn an_hmac_secret_defaults_to_metal_edit_and_names_its_origin() {
        let c = config_of(
            &data(&[("url", "http://127.0.0.1:8080/metal\n"), ("hmac", "k")]),
            "Secret ns/creds",
        )
        .expect("accepted");
        assert_eq!(c.url.as_str(), "http://127.0.0.1:8080/metal");
        assert!(matches!(c.auth, Auth::Hmac { ref key, auth_type: AuthType::Edit } if key == "k"));
        assert_eq!(c.origin.as_deref(), Some("Secret ns/creds"));
    }

    #[test]
    fn a_token_secret_authenticates_by_bearer_and_hmac_wins_when_both_are_given() {
        let token =
            config_of(&data(&[("url", "https://a/"), ("token", "t")]), "s").expect("accepted");
        assert!(matches!(token.auth, Auth::Bearer(ref t) if t == "t"));
        let both = [
            ("url", "https://a/"),
            ("token", "t"),
            ("hmac", "k"),
            ("hmacAuthType", "Metal-Admin"),
        ];
        let both = config_of(&data(&both), "s").expect("accepted");
        assert!(matches!(
            both.auth,
            Auth::Hmac {
                auth_type: AuthType::Admin,
                ..
            }
        ));
    }

    #[test]
    fn each_wrong_shape_names_the_key_and_what_the_secret_should_hold() {
        let cases: [(&[(&str, &str)], &str); 5] = [
            (&[("hmac", "k")], "holds no `url`"),
            (
                &[("url", "ftp://a"), ("hmac", "k")],
                "`url` is not an http or https URL",
            ),
            (&[("url", "http://a")], "neither `hmac` nor `token`"),
            (
                &[("url", "http://a"), ("hmac", " ")],
                "neither `hmac` nor `token`",
            ),
            (
                &[("url", "http://a"), ("hmac", "k"), ("hmacAuthType", "edit")],
                "Metal-View, Metal-Edit, Metal-Admin",
            ),
        ];
        for (pairs, expected) in cases {
            let e = error(pairs);
            assert!(e.contains(expected), "{pairs:?}: {e}");
            assert!(e.contains("Metal-Edit"), "{pairs:?} names no choices: {e}");
        }
        let mut binary = data(&[("url", "http://a")]);
        binary.insert("hmac".into(), ByteString(vec![0xff, 0xfe]));
        let e = config_of(&binary, "s").expect_err("refused");
        assert!(e.contains("`hmac` is not UTF-8"), "{e}");
    }

    #[test]
    fn a_v2_secret_calls_metal_apiserver_with_its_token_in_its_project() {
        let project = "00000000-0000-0000-0000-000000000001";
        let v2 = [
            ("url", "https://api.example/"),
            ("token", "a.b.c"),
            ("project", project),
            ("apiVersion", "v2"),
        ];
        let c = config_of(&data(&v2), "s").expect("accepted");
        assert_eq!(c.v2_project.as_deref(), Some(project));
        assert!(matches!(c.auth, Auth::Bearer(ref t) if t == "a.b.c"));
        let v1 = config_of(&data(&[("url", "https://a/"), ("token", "t")]), "s");
        assert_eq!(v1.expect("accepted").v2_project, None);
        let leftover = [
            ("url", "https://api.example/"),
            ("token", "a.b.c"),
            ("project", project),
            ("apiVersion", "v2"),
            ("hmac", "k"),
        ];
        let moved = config_of(&data(&leftover), "s").expect("v1's key left unread");
        assert!(matches!(moved.auth, Auth::Bearer(_)));
        let cases: [(&[(&str, &str)], &str); 3] = [
            (
                &[
                    ("url", "http://a"),
                    ("project", project),
                    ("apiVersion", "v2"),
                ],
                "holds no `token`",
            ),
            (
                &[("url", "http://a"), ("token", "t"), ("apiVersion", "v2")],
                "`project` is not",
            ),
            (
                &[("url", "http://a"), ("token", "t"), ("apiVersion", "2")],
                "not one of v1, v2",
            ),
        ];
        for (pairs, expected) in cases {
            let e = error(pairs);
            assert!(e.contains(expected), "{pairs:?}: {e}");
            assert!(
                e.contains("`apiVersion`: v2"),
                "{pairs:?} names no choices: {e}"
            );
        }
    }

    #[test]
    fn no_error_carries_what_the_secret_holds() {
        let e = error(&[("url", "ftp://host.example"), ("hmac", "super-secret")]);
        assert!(
            !e.contains("super-secret") && !e.contains("host.example"),
            "{e}"
        );
    }
}
