//! The parts of a catalog that read alike whoever's credentials ask, read once for every
//! catalog that shares them: partitions, sizes and images for every catalog of one metal-api;
//! through API v2, a project's networks and machines for the catalogs of its tokens (each token
//! still proving with its own call that it is of the project). Five clusters with a token each
//! for one project read them once when their catalogs are first made, not five times.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// One read of the parts, and when it began.
struct Read<T> {
    parts: Arc<T>,
    began: Instant,
}

/// The public parts of one metal-api's catalog, shared by the catalogs of every set of
/// credentials that reaches it.
pub(crate) struct SharedRead<T> {
    read: RwLock<Option<Read<T>>>,
    /// One read at a time; the others wait for it and take what it brings.
    reading: tokio::sync::Mutex<()>,
    /// The oldest a read may be to serve a catalog made or refreshed without a miss: the period
    /// its catalogs are refreshed at, so none is staler than when it read them itself.
    pub(crate) max_age: Duration,
}

impl<T> SharedRead<T> {
    pub(crate) fn new(max_age: Duration) -> Arc<SharedRead<T>> {
        Arc::new(SharedRead {
            read: RwLock::new(None),
            reading: tokio::sync::Mutex::new(()),
            max_age,
        })
    }

    fn current(&self) -> Option<(Arc<T>, Instant)> {
        let read = self.read.read().unwrap_or_else(|p| p.into_inner());
        read.as_ref().map(|r| (r.parts.clone(), r.began))
    }

    /// The parts as read by a read that began after `after` (the one in flight, if any), or as
    /// `fetch` reads them now; and when that read began. A failed read is not kept.
    pub(crate) async fn get<E>(
        &self,
        after: Instant,
        fetch: impl Future<Output = Result<T, E>>,
    ) -> Result<(Arc<T>, Instant), E> {
        let _turn = self.reading.lock().await;
        if let Some((parts, began)) = self.current()
            && began > after
        {
            return Ok((parts, began));
        }
        let began = Instant::now();
        let parts = Arc::new(fetch.await?);
        *self.read.write().unwrap_or_else(|p| p.into_inner()) = Some(Read {
            parts: parts.clone(),
            began,
        });
        Ok((parts, began))
    }

    /// The instant a read must have begun after to serve a catalog made or refreshed without a
    /// miss: `max_age` ago.
    pub(crate) fn young_after(&self) -> Instant {
        let now = Instant::now();
        now.checked_sub(self.max_age).unwrap_or(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn counted(reads: &AtomicUsize, value: u32) -> Result<u32, String> {
        reads.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        Ok(value)
    }

    #[tokio::test]
    async fn catalogs_made_together_read_the_public_parts_once() {
        let shared = SharedRead::<u32>::new(Duration::from_secs(60));
        let reads = AtomicUsize::new(0);
        let after = shared.young_after();
        let (a, b, c) = tokio::join!(
            shared.get(after, counted(&reads, 1)),
            shared.get(after, counted(&reads, 2)),
            shared.get(after, counted(&reads, 3)),
        );
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        let values: Vec<u32> = [a, b, c].into_iter().map(|r| *r.expect("read").0).collect();
        assert_eq!(values, vec![1, 1, 1]);
        // A catalog made later, within the age, takes the same read.
        let (later, _) = shared
            .get(shared.young_after(), counted(&reads, 4))
            .await
            .expect("read");
        assert_eq!((*later, reads.load(Ordering::SeqCst)), (1, 1));
    }

    #[tokio::test]
    async fn a_refresh_after_a_miss_reads_anew_unless_a_newer_read_came_since() {
        let shared = SharedRead::<u32>::new(Duration::from_secs(60));
        let reads = AtomicUsize::new(0);
        let (_, missed) = shared
            .get(shared.young_after(), counted(&reads, 1))
            .await
            .expect("read");
        // The catalog that missed holds the read that began at `missed`: it is read again.
        let (fresh, newer) = shared.get(missed, counted(&reads, 2)).await.expect("read");
        assert_eq!((*fresh, reads.load(Ordering::SeqCst)), (2, 2));
        // Another catalog that missed on the first read takes the second.
        let (same, _) = shared.get(missed, counted(&reads, 3)).await.expect("read");
        assert_eq!((*same, reads.load(Ordering::SeqCst)), (2, 2));
        assert!(newer > missed);
    }

    #[tokio::test]
    async fn a_failed_read_is_not_kept_and_reads_older_than_the_age_are_read_again() {
        let shared = SharedRead::<u32>::new(Duration::ZERO);
        let failed: Result<_, String> = shared
            .get(shared.young_after(), async {
                Err("unauthenticated".to_owned())
            })
            .await;
        assert!(failed.is_err());
        let reads = AtomicUsize::new(0);
        let (first, _) = shared
            .get(shared.young_after(), counted(&reads, 1))
            .await
            .expect("read");
        let (second, _) = shared
            .get(shared.young_after(), counted(&reads, 2))
            .await
            .expect("read");
        assert_eq!((*first, *second, reads.load(Ordering::SeqCst)), (1, 2, 2));
    }
}
