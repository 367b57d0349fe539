//! One catalog per metal-api capms is given credentials for: capms's own, refreshed on a timer,
//! and one per credentials Secret a cluster names, refreshed as it is used. One tenant's
//! catalog never judges another tenant's objects.

use super::catalog::CatalogCache;
use super::credentials::{CredentialsError, MetalClients};
use super::public_parts::SharedRead;
use metal_api::{ProjectParts, PublicParts};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a Secret's catalog is kept unused before it is dropped (when another is made).
const UNUSED: Duration = Duration::from_secs(3600);

/// A credentials Secret's catalog, and when it was last asked for.
struct Kept {
    cache: Arc<CatalogCache>,
    used: Instant,
}

/// A metal-api, as its public parts are shared: by URL and API version.
type Api = (url::Url, bool);

/// A project of a metal-apiserver, as its parts are shared among its tokens: by URL and
/// project id.
type ProjectOf = (url::Url, String);

/// Reads shared by key while a catalog holds them.
type Shared<K, T> = Mutex<HashMap<K, Weak<SharedRead<T>>>>;

/// capms's own catalog and those of the credentials Secrets clusters name, by namespace and
/// name.
pub struct Catalogs {
    own: Arc<CatalogCache>,
    clients: Arc<MetalClients>,
    /// How old a Secret's catalog may grow before it is refreshed in the background.
    period: Duration,
    kept: Mutex<HashMap<(String, String), Kept>>,
    /// The public parts of each metal-api that a catalog kept reaches.
    public: Shared<Api, PublicParts>,
    /// The parts of each API v2 project that a catalog kept reaches.
    projects: Shared<ProjectOf, ProjectParts>,
}

impl Catalogs {
    /// The catalogs of `clients`' metal-apis, capms's own being `own`; a Secret's is refreshed
    /// once it is older than `period`.
    pub fn new(
        own: Arc<CatalogCache>,
        clients: Arc<MetalClients>,
        period: Duration,
    ) -> Arc<Catalogs> {
        let own_api = (own.base_url(), own.is_v2());
        let public = HashMap::from([(own_api, Arc::downgrade(own.public()))]);
        Arc::new(Catalogs {
            own,
            clients,
            period,
            kept: Mutex::default(),
            public: Mutex::new(public),
            projects: Mutex::default(),
        })
    }

    /// capms's own metal-api's catalog: for clusters that name no credentials.
    pub fn own(&self) -> &Arc<CatalogCache> {
        &self.own
    }

    /// Every metal-api client: capms's own and those made from credentials Secrets.
    pub fn clients(&self) -> &Arc<MetalClients> {
        &self.clients
    }

    /// Refreshes capms's own catalog every `period` until the process ends.
    pub(crate) fn spawn_refresher(&self) {
        self.own.spawn_refresher(self.period);
    }

    /// The catalog of the metal-api that the credentials Secret `secret` in `namespace` reaches,
    /// with its credentials as the Secret holds them now; capms's own without a Secret.
    pub async fn of(
        &self,
        namespace: &str,
        secret: Option<&str>,
    ) -> Result<Arc<CatalogCache>, CredentialsError> {
        let Some(name) = secret else {
            return Ok(self.own.clone());
        };
        let key = (namespace.to_owned(), name.to_owned());
        let client = match self.clients.of(namespace, Some(name)).await {
            Ok(client) => client,
            Err(e) => {
                if !e.is_transient() {
                    self.lock().remove(&key);
                }
                return Err(e);
            }
        };
        let cache = {
            let mut kept = self.lock();
            match kept.get_mut(&key) {
                // Rotated credentials for the same metal-api and project: the snapshot stays
                // good.
                Some(k) if k.cache.read_alike_by(&client) => {
                    k.cache.use_client(client);
                    k.used = Instant::now();
                    k.cache.clone()
                }
                _ => {
                    kept.retain(|_, k| k.used.elapsed() < UNUSED);
                    let public = self.public_of(&client);
                    let project = self.project_of(&client);
                    let cache = CatalogCache::sharing(client, public, project);
                    // Fetched at once, so that the request that made it rarely waits long.
                    let first = cache.clone();
                    tokio::spawn(async move { first.first().await });
                    let used = Instant::now();
                    kept.insert(
                        key,
                        Kept {
                            cache: cache.clone(),
                            used,
                        },
                    );
                    cache
                }
            }
        };
        cache.refresh_when_older(self.period);
        Ok(cache)
    }

    /// The public parts shared by the catalogs of `client`'s metal-api.
    fn public_of(&self, client: &metal_api::Client) -> Arc<SharedRead<PublicParts>> {
        let api = (client.base_url().clone(), client.is_v2());
        shared_of(&self.public, api, self.period)
    }

    /// Through API v2, the parts shared by the catalogs of the tokens of `client`'s project;
    /// None through v1, whose credentials are not scoped to one project.
    fn project_of(&self, client: &metal_api::Client) -> Option<Arc<SharedRead<ProjectParts>>> {
        let project = client.v2_project()?;
        let key = (client.base_url().clone(), project.to_owned());
        Some(shared_of(&self.projects, key, self.period))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Kept>> {
        // A panic elsewhere while the map was held leaves it whole: each entry is written at once.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The read shared under `key`, made (its reads kept for `period`) when none is held.
fn shared_of<K: Eq + std::hash::Hash, T>(
    shared: &Shared<K, T>,
    key: K,
    period: Duration,
) -> Arc<SharedRead<T>> {
    let mut shared = shared.lock().unwrap_or_else(|p| p.into_inner());
    shared.retain(|_, read| read.strong_count() > 0);
    if let Some(read) = shared.get(&key).and_then(Weak::upgrade) {
        return read;
    }
    let read = SharedRead::new(period);
    shared.insert(key, Arc::downgrade(&read));
    read
}

/// The credentials that judge what may serve the clusters in `named` (each the Secret a cluster
/// names, or none for capms's own metal-api): the one they agree on, capms's own when there
/// are none; Err naming each when they differ.
pub(crate) fn agreed(named: BTreeSet<Option<String>>) -> Result<Option<String>, Vec<String>> {
    if named.len() <= 1 {
        return Ok(named.into_iter().flatten().next());
    }
    Err(named
        .into_iter()
        .map(|n| match n {
            Some(name) => format!("Secret {name}"),
            None => "capms's own".to_owned(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[Option<&str>]) -> BTreeSet<Option<String>> {
        names.iter().map(|n| n.map(str::to_owned)).collect()
    }

    #[test]
    fn clusters_agreeing_on_credentials_give_them_and_differing_ones_are_named() {
        assert_eq!(agreed(named(&[])), Ok(None));
        assert_eq!(agreed(named(&[None])), Ok(None));
        assert_eq!(agreed(named(&[Some("a")])), Ok(Some("a".into())));
        assert_eq!(
            agreed(named(&[Some("a"), None, Some("b")])),
            Err(vec![
                "capms's own".into(),
                "Secret a".into(),
                "Secret b".into()
            ])
        );
    }
}
