//! What admission checks against: a snapshot of metal-api's partitions, sizes, images, projects,
//! networks and machines, refreshed in the background and on a miss, so that no admission
//! request waits on a cold metal-api call.

use metal_api::Catalog;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

struct Snapshot {
    catalog: Arc<Catalog>,
    fetched: Instant,
}

/// The shared, refreshed catalog.
pub struct CatalogCache {
    client: metal_api::Client,
    snapshot: RwLock<Option<Snapshot>>,
    /// One refresh at a time; others wait for it (bounded) instead of calling metal-api too.
    refreshing: tokio::sync::Mutex<()>,
    /// When a refresh after a miss last failed or timed out.
    failed_after_miss: RwLock<Option<Instant>>,
    /// How long a request may wait for a refresh.
    pub max_wait: Duration,
    /// Each refresh's catalog, for the controllers that follow a part of it.
    refreshed: tokio::sync::watch::Sender<Option<Arc<Catalog>>>,
}

impl CatalogCache {
    pub fn new(client: metal_api::Client) -> Arc<CatalogCache> {
        Arc::new(CatalogCache {
            client,
            snapshot: RwLock::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            failed_after_miss: RwLock::new(None),
            max_wait: Duration::from_secs(3),
            refreshed: tokio::sync::watch::Sender::new(None),
        })
    }

    /// A cache that starts out with `catalog`.
    #[cfg(test)]
    pub(crate) fn with_catalog(client: metal_api::Client, catalog: Catalog) -> Arc<CatalogCache> {
        let cache = Self::new(client);
        *cache.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Some(Snapshot {
            catalog: Arc::new(catalog),
            fetched: Instant::now(),
        });
        cache
    }

    fn current(&self) -> Option<(Arc<Catalog>, Instant)> {
        let s = self.snapshot.read().unwrap_or_else(|p| p.into_inner());
        s.as_ref().map(|s| (s.catalog.clone(), s.fetched))
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
        let started = Instant::now();
        let catalog = Arc::new(Catalog::fetch(&self.client).await?);
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Some(Snapshot {
            catalog: catalog.clone(),
            fetched: started,
        });
        self.refreshed.send_replace(Some(catalog.clone()));
        Ok(catalog)
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
    /// waiting at most `max_wait`. None when metal-api cannot be reached in time.
    pub async fn get(&self) -> Option<Arc<Catalog>> {
        if let Some((catalog, _)) = self.current() {
            return Some(catalog);
        }
        match tokio::time::timeout(self.max_wait, self.refresh(None)).await {
            Ok(Ok(c)) => Some(c),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "metal-api catalog unavailable for admission");
                None
            }
            Err(_) => None,
        }
    }

    /// After a miss (a name the cached catalog does not know), a fresher catalog if one can be
    /// had within `max_wait`; the cached one otherwise.
    pub(crate) async fn refreshed_after_miss(&self, cached: Arc<Catalog>) -> Arc<Catalog> {
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
        match tokio::time::timeout(self.max_wait, self.refresh(since)).await {
            Ok(Ok(c)) => c,
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
    /// what the caller seeks. None when metal-api cannot be reached in time.
    pub async fn knowing(&self, knows: impl Fn(&Catalog) -> bool) -> Option<Arc<Catalog>> {
        let cached = self.get().await?;
        if knows(&cached) {
            return Some(cached);
        }
        Some(self.refreshed_after_miss(cached).await)
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
