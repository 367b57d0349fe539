//! What admission checks against: a snapshot of one metal-api's partitions, sizes, images,
//! projects, networks and machines, refreshed in the background and on a miss, so that no
//! admission request waits on a cold metal-api call.

use super::public_parts::SharedRead;
use super::size_images::{Verdict, Verdicts, verdict_in, verdict_of};
use metal_api::{Catalog, ProjectParts, PublicParts};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

struct Snapshot {
    catalog: Arc<Catalog>,
    /// When the read of its oldest part began.
    fetched: Instant,
    /// When the read of its public parts began.
    public_read: Instant,
    /// When the read of its project's parts began, when they are shared.
    project_read: Option<Instant>,
}

/// Why there is no catalog to check against.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("{0}")]
    Failed(#[from] metal_api::Error),
    #[error("metal-api did not answer within {0:?}")]
    Slow(Duration),
}

/// The shared, refreshed catalog of one metal-api.
pub struct CatalogCache {
    /// Replaced when the credentials it was made with are rotated.
    client: RwLock<metal_api::Client>,
    snapshot: RwLock<Option<Snapshot>>,
    /// One refresh at a time; others wait for it (bounded) instead of calling metal-api too.
    refreshing: tokio::sync::Mutex<()>,
    /// When a refresh after a miss last failed or timed out.
    failed_after_miss: RwLock<Option<Instant>>,
    /// How long a request may wait for a refresh.
    pub max_wait: Duration,
    /// Each refresh's catalog, for the controllers that follow a part of it.
    refreshed: tokio::sync::watch::Sender<Option<Arc<Catalog>>>,
    /// When a refresh in the background last began.
    began: RwLock<Option<Instant>>,
    /// metal-apiserver's verdicts on sizes with images, asked one at a time.
    verdicts: Verdicts,
    trying: tokio::sync::Mutex<()>,
    /// The public parts, shared with the catalogs of other credentials for the same metal-api.
    public: Arc<SharedRead<PublicParts>>,
    /// Through API v2, the project's networks and machines, shared with the catalogs of the
    /// project's other tokens.
    project: Option<Arc<SharedRead<ProjectParts>>>,
}

impl CatalogCache {
    /// The catalog that `client` reads, refreshed every `period` (by its owner).
    pub fn new(client: metal_api::Client, period: Duration) -> Arc<CatalogCache> {
        Self::sharing(client, SharedRead::new(period), None)
    }

    /// The catalog that `client` reads, its public parts shared through `public` and, when
    /// given, its project's parts through `project`.
    pub(crate) fn sharing(
        client: metal_api::Client,
        public: Arc<SharedRead<PublicParts>>,
        project: Option<Arc<SharedRead<ProjectParts>>>,
    ) -> Arc<CatalogCache> {
        Arc::new(CatalogCache {
            client: RwLock::new(client),
            snapshot: RwLock::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            failed_after_miss: RwLock::new(None),
            max_wait: Duration::from_secs(3),
            refreshed: tokio::sync::watch::Sender::new(None),
            began: RwLock::new(None),
            verdicts: Verdicts::default(),
            trying: tokio::sync::Mutex::new(()),
            public,
            project,
        })
    }

    /// The client refreshes use from now on: the same metal-api's, with rotated credentials.
    pub(crate) fn use_client(&self, client: metal_api::Client) {
        *self.client.write().unwrap_or_else(|p| p.into_inner()) = client;
    }

    /// The metal-api this catalog is of.
    pub(crate) fn base_url(&self) -> url::Url {
        let client = self.client.read().unwrap_or_else(|p| p.into_inner());
        client.base_url().clone()
    }

    /// Whether `client` reads what this catalog holds: the same metal-api and, through API v2,
    /// the same project (rotated credentials, not other ones).
    pub(crate) fn read_alike_by(&self, client: &metal_api::Client) -> bool {
        let own = self.client.read().unwrap_or_else(|p| p.into_inner());
        own.base_url() == client.base_url() && own.v2_project() == client.v2_project()
    }

    /// Whether this catalog is read through API v2.
    pub(crate) fn is_v2(&self) -> bool {
        let client = self.client.read().unwrap_or_else(|p| p.into_inner());
        client.is_v2()
    }

    /// The public parts this catalog shares with others of the same metal-api.
    pub(crate) fn public(&self) -> &Arc<SharedRead<PublicParts>> {
        &self.public
    }

    /// A cache that starts out with `catalog`.
    #[cfg(test)]
    pub(crate) fn with_catalog(client: metal_api::Client, catalog: Catalog) -> Arc<CatalogCache> {
        let cache = Self::new(client, Duration::from_secs(300));
        let now = Instant::now();
        *cache.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Some(Snapshot {
            catalog: Arc::new(catalog),
            fetched: now,
            public_read: now,
            project_read: None,
        });
        cache
    }

    fn current(&self) -> Option<(Arc<Catalog>, Instant)> {
        let s = self.snapshot.read().unwrap_or_else(|p| p.into_inner());
        s.as_ref().map(|s| (s.catalog.clone(), s.fetched))
    }

    /// When the reads of the held snapshot's public and (when shared) project parts began.
    fn shared_reads(&self) -> (Option<Instant>, Option<Instant>) {
        let s = self.snapshot.read().unwrap_or_else(|p| p.into_inner());
        let s = s.as_ref();
        (s.map(|s| s.public_read), s.and_then(|s| s.project_read))
    }

    /// Fetches a new snapshot unless one newer than `newer_than` arrives while waiting.
    pub async fn refresh(
        &self,
        newer_than: Option<Instant>,
    ) -> Result<Arc<Catalog>, metal_api::Error> {
        let _guard = self.refreshing.lock().await;
        if let (Some((catalog, fetched)), Some(t)) = (self.current(), newer_than)
            && fetched > t
        {
            return Ok(catalog);
        }
        // Shared parts no older than the catalog's refresh period; when asked for a snapshot
        // newer than the held one, newer than its shared parts too (read again unless another
        // catalog read them since).
        let after = |young: Instant, held: Option<Instant>| match (newer_than, held) {
            (Some(_), Some(held)) => held.max(young),
            _ => young,
        };
        let (public_read, project_read) = self.shared_reads();
        let public_after = after(self.public.young_after(), public_read);
        let project_after = self
            .project
            .as_ref()
            .map(|p| after(p.young_after(), project_read));
        self.fetch(public_after, project_after).await
    }

    /// The first snapshot: the one a refresh in flight brings, or a fresh one.
    pub(crate) async fn first(&self) -> Result<Arc<Catalog>, metal_api::Error> {
        let _guard = self.refreshing.lock().await;
        if let Some((catalog, _)) = self.current() {
            return Ok(catalog);
        }
        let project_after = self.project.as_ref().map(|p| p.young_after());
        self.fetch(self.public.young_after(), project_after).await
    }

    /// Fetches a snapshot, its public parts as read after `public_after` and its shared project
    /// parts as read after `project_after`; the caller holds `refreshing`.
    async fn fetch(
        &self,
        public_after: Instant,
        project_after: Option<Instant>,
    ) -> Result<Arc<Catalog>, metal_api::Error> {
        let started = Instant::now();
        let client = self
            .client
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let ((public, public_read), (own, project_read)) = tokio::try_join!(
            self.public.get(public_after, PublicParts::fetch(&client)),
            self.fetch_own(&client, project_after)
        )?;
        let catalog = Arc::new(own.with_public(&public));
        let oldest = project_read.map_or(public_read, |p| p.min(public_read));
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Some(Snapshot {
            catalog: catalog.clone(),
            fetched: started.min(oldest),
            public_read,
            project_read,
        });
        self.refreshed.send_replace(Some(catalog.clone()));
        Ok(catalog)
    }

    /// What `client`'s credentials see of their own, and when the read of the project's shared
    /// parts began. A token proves it is of the project with its own call, beside the shared
    /// read (which may be another token's): a token that cannot see the project is refused and
    /// is never handed what another token read.
    async fn fetch_own(
        &self,
        client: &metal_api::Client,
        project_after: Option<Instant>,
    ) -> Result<(Catalog, Option<Instant>), metal_api::Error> {
        let (Some(shared), Some(after)) = (&self.project, project_after) else {
            return Ok((Catalog::fetch_own(client).await?, None));
        };
        let (projects, (parts, read)) = tokio::try_join!(
            client.projects(),
            shared.get(after, ProjectParts::fetch(client))
        )?;
        Ok((Catalog::of_projects(projects, (*parts).clone()), Some(read)))
    }

    /// Yields on every refresh that changes what `part` takes of the catalog (the first refresh
    /// included), until the cache is dropped: what wakes the controllers that follow that part.
    pub(crate) fn changes<P, F>(
        &self,
        part: F,
    ) -> impl futures::Stream<Item = ()> + Send + use<P, F>
    where
        P: PartialEq + Send + Sync + 'static,
        F: Fn(&Catalog) -> P + Send + Sync + 'static,
    {
        let receiver = self.refreshed.subscribe();
        futures::stream::unfold(
            (receiver, None, part),
            |(mut receiver, mut last, part)| async move {
                loop {
                    receiver.changed().await.ok()?;
                    let Some(catalog) = receiver.borrow_and_update().clone() else {
                        continue;
                    };
                    let now = Some(part(&catalog));
                    if now != last {
                        last = now;
                        return Some(((), (receiver, last, part)));
                    }
                }
            },
        )
    }

    /// The catalog to check against: the cached one, or a fresh one when there is none yet,
    /// waiting at most `max_wait`. The fetch goes on after the wait, for the next request.
    pub async fn get(self: &Arc<Self>) -> Result<Arc<Catalog>, Unavailable> {
        if let Some((catalog, _)) = self.current() {
            return Ok(catalog);
        }
        let cache = self.clone();
        let first = tokio::spawn(async move { cache.first().await });
        match tokio::time::timeout(self.max_wait, first).await {
            Ok(Ok(Ok(c))) => Ok(c),
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "metal-api catalog unavailable for admission");
                Err(e.into())
            }
            Ok(Err(_)) | Err(_) => Err(Unavailable::Slow(self.max_wait)),
        }
    }

    /// Refreshes in the background when neither the snapshot nor the last such refresh is
    /// younger than `period`: for a catalog nobody refreshes on a timer, kept as fresh as it is
    /// used.
    pub(crate) fn refresh_when_older(self: &Arc<Self>, period: Duration) {
        let young = |t: Option<Instant>| t.is_some_and(|t| t.elapsed() < period);
        let fetched = self.current().map(|(_, t)| t);
        let mut began = self.began.write().unwrap_or_else(|p| p.into_inner());
        // No snapshot yet: the first `get` fetches it.
        if fetched.is_none() || young(fetched) || young(*began) {
            return;
        }
        *began = Some(Instant::now());
        let cache = self.clone();
        tokio::spawn(async move {
            if let Err(e) = cache.refresh(fetched).await {
                tracing::warn!(error = %e, category = e.category().label(), "refreshing a metal-api catalog failed");
            }
        });
    }

    /// After a miss (a name the cached catalog does not know), a fresher catalog if one can be
    /// had within `max_wait`; the cached one otherwise.
    pub(crate) async fn refreshed_after_miss(
        self: &Arc<Self>,
        cached: Arc<Catalog>,
    ) -> Arc<Catalog> {
        let since = self.current().map(|(_, t)| t);
        // A snapshot from the last second is fresh enough: do not hammer metal-api on typos.
        // Nor does a miss wait within a second of a refresh that failed: while metal-api is down,
        // every denial would wait out `max_wait`. A miss during a refresh waits for it.
        let failed = *self
            .failed_after_miss
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let recent = |t: Option<Instant>| t.is_some_and(|t| t.elapsed() < Duration::from_secs(1));
        if recent(since) || recent(failed) {
            return cached;
        }
        // The refresh goes on after the wait, for the next request.
        let cache = self.clone();
        let refresh = tokio::spawn(async move { cache.refresh(since).await });
        match tokio::time::timeout(self.max_wait, refresh).await {
            Ok(Ok(Ok(c))) => c,
            _ => {
                *self
                    .failed_after_miss
                    .write()
                    .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                cached
            }
        }
    }

    /// The catalog, or a fresher one (as after a miss) when `knows` says the cached one lacks
    /// what the caller seeks.
    pub async fn knowing(
        self: &Arc<Self>,
        knows: impl Fn(&Catalog) -> bool,
    ) -> Result<Arc<Catalog>, Unavailable> {
        let cached = self.get().await?;
        if knows(&cached) {
            return Ok(cached);
        }
        Ok(self.refreshed_after_miss(cached).await)
    }

    /// Whether metal-api lets machines of `size` take the image `image` (a full id): through v1,
    /// as `catalog`'s size image constraints say (v1 lets only its admins ask); through API v2,
    /// a verdict kept a while, or asked within `max_wait`.
    pub(crate) async fn size_takes_image(
        &self,
        catalog: &Catalog,
        size: &str,
        image: &str,
    ) -> Verdict {
        let client = self
            .client
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !client.is_v2() {
            return verdict_in(&catalog.size_image_constraints, size, image);
        }
        let ask = async {
            // One question at a time: machines of one pair, admitted together, wait for the
            // verdict the first of them asks for.
            let _turn = self.trying.lock().await;
            let now = Instant::now();
            if let Some(kept) = self.verdicts.kept(size, image, now) {
                return kept;
            }
            let verdict = verdict_of(client.try_size_image(size, image).await);
            self.verdicts.keep(size, image, &verdict, now);
            verdict
        };
        match tokio::time::timeout(self.max_wait, ask).await {
            Ok(verdict) => verdict,
            Err(_) => Verdict::Unknown(format!(
                "metal-apiserver did not answer within {:?}",
                self.max_wait
            )),
        }
    }

    /// Refreshes every `period` until the process ends.
    pub(crate) fn spawn_refresher(self: &Arc<Self>, period: Duration) {
        let cache = self.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = cache.refresh(None).await {
                    tracing::warn!(error = %e, category = e.category().label(), "refreshing the metal-api catalog failed");
                }
                tokio::time::sleep(period).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project token as metal-apiserver issues them (only its claims are read here).
    const TOKEN: &str = "e30.eyJpYXQiOjAsImV4cCI6NDEwMjQ0NDgwMH0.sig";

    fn client(url: &str, project: Option<&str>) -> metal_api::Client {
        let url = url.parse().expect("a URL");
        let mut config = metal_api::Config::new(url, metal_api::Auth::Bearer(TOKEN.into()));
        config.v2_project = project.map(str::to_owned);
        metal_api::Client::new(config).expect("a client")
    }

    #[test]
    fn credentials_read_alike_only_for_the_same_metal_api_and_project() {
        let (a, b) = ("http://127.0.0.1:1/", "http://127.0.0.2:1/");
        let cache = CatalogCache::new(client(a, Some("p1")), Duration::from_secs(60));
        assert!(
            cache.read_alike_by(&client(a, Some("p1"))),
            "a rotated token"
        );
        assert!(
            !cache.read_alike_by(&client(a, Some("p2"))),
            "another project"
        );
        assert!(!cache.read_alike_by(&client(b, Some("p1"))), "another URL");
        assert!(!cache.read_alike_by(&client(a, None)), "v1's credentials");
    }
}
