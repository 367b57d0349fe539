//! One watch per kind for the whole manager: kube-runtime's reflector fills the kind's store,
//! which every reconcile reads instead of asking the apiserver, and each controller that follows
//! the kind gets every object the watch brings (the store's own copy, shared, not cloned),
//! filtered by that controller to the changes it reads.
//!
//! Why not kube-runtime's shared reflector (`store_shared`, `Writer::subscribe`)? Its
//! subscribers (kube-runtime 5.0's `ReflectHandle`) look each object up in the store when they
//! are polled: an object deleted in between is skipped with `Pending` without a wake-up
//! registered, and the subscriber then sleeps until something else wakes its task (the test
//! below shows it). Deletions are routine here (every machine and firewall goes), and a
//! controller whose trigger stream stalls misses events. It also does not pass deletions on,
//! which the MetalStackCluster's teardown waits for. So the fan-out stays here, on top of
//! kube's reflector and store.

use super::skipped_fields::WithoutManagedFields;
use futures::channel::mpsc;
use futures::{StreamExt, TryStreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A watch of one kind, the store it fills, and its followers.
pub struct Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// Decoding skips the objects' managedFields (see [`WithoutManagedFields`]).
    api: Api<WithoutManagedFields<K>>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    followers: Vec<mpsc::UnboundedSender<Arc<K>>>,
    /// Followers of the deletions alone.
    deletions: Vec<mpsc::UnboundedSender<Arc<K>>>,
}

/// A follower's objects: every object applied, listed or deleted, after the store has it.
pub(crate) type Followed<K> = futures::stream::BoxStream<'static, Arc<K>>;

impl<K> Feed<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    pub fn new(api: Api<WithoutManagedFields<K>>, config: watcher::Config) -> Feed<K> {
        Feed {
            api,
            config,
            writer: reflector::store::Writer::default(),
            followers: Vec::new(),
            deletions: Vec::new(),
        }
    }

    pub fn store(&self) -> Store<K> {
        self.writer.as_reader()
    }

    /// One more follower.
    pub fn follow(&mut self) -> Followed<K> {
        let (tx, rx) = mpsc::unbounded();
        self.followers.push(tx);
        rx.boxed()
    }

    /// One more follower of the objects deleted (their last state), and of nothing else.
    pub(crate) fn follow_deletions(&mut self) -> Followed<K> {
        let (tx, rx) = mpsc::unbounded();
        self.deletions.push(tx);
        rx.boxed()
    }

    /// One more follower that sees an object only when `changed` says something it reads
    /// changed (and always the first time): kube-runtime's predicate filter.
    pub(crate) fn follow_changes(&mut self, changed: fn(&K) -> u64) -> Followed<K> {
        self.follow()
            .map(|o| Ok::<_, watcher::Error>(Shared(o)))
            .predicate_filter(move |o: &Shared<K>| Some(changed(&o.0)), Default::default())
            .filter_map(|o| std::future::ready(o.ok().map(|Shared(o)| o)))
            .boxed()
    }

    /// Watches until the stream ends (never, unless the runtime stops).
    pub async fn run(self) {
        let kind = K::kind(&());
        let store = self.writer.as_reader();
        let followers = self.followers;
        let deletions = self.deletions;
        watcher::watcher(self.api, self.config)
            .map_ok(unwrap)
            .default_backoff()
            .modify(drop_last_applied)
            .reflect(self.writer)
            .for_each(|event| {
                let shared = match event {
                    // The store's copy: one object, however many follow the kind.
                    Ok(Event::Apply(o) | Event::InitApply(o)) => Some(
                        store
                            .get(&ObjectRef::from_obj(&o))
                            .unwrap_or_else(|| Arc::new(o)),
                    ),
                    Ok(Event::Delete(o)) => {
                        let o = Arc::new(o);
                        for follower in &deletions {
                            let _ = follower.unbounded_send(o.clone());
                        }
                        Some(o)
                    }
                    Ok(Event::Init | Event::InitDone) => None,
                    Err(e) => {
                        tracing::warn!(%kind, error = %e, "watch failed; retrying");
                        None
                    }
                };
                for follower in shared
                    .iter()
                    .flat_map(|o| followers.iter().map(move |f| (o, f)))
                {
                    // A follower that stopped (shutdown) needs nothing more.
                    let _ = follower.1.unbounded_send(follower.0.clone());
                }
                std::future::ready(())
            })
            .await
    }
}

/// The decoded object out of its wrapper.
fn unwrap<K>(event: Event<WithoutManagedFields<K>>) -> Event<K> {
    match event {
        Event::Apply(WithoutManagedFields(o)) => Event::Apply(o),
        Event::Delete(WithoutManagedFields(o)) => Event::Delete(o),
        Event::Init => Event::Init,
        Event::InitApply(WithoutManagedFields(o)) => Event::InitApply(o),
        Event::InitDone => Event::InitDone,
    }
}

/// What no reconcile reads and many objects carry: kubectl's copy of the last applied manifest
/// (the field managers' records are not even decoded). Dropped before caching.
fn drop_last_applied<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// A shared object as kube-runtime's predicate filter takes it.
struct Shared<K>(Arc<K>);

impl<K: Resource + Clone> Resource for Shared<K> {
    resource_type_of!(K);
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        Arc::make_mut(&mut self.0).meta_mut()
    }
}

/// Hashes `value` into a predicate's fingerprint.
pub(crate) fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// What a controller reads of its own objects outside status: a status write (capms's own, the
/// only writer of status) wakes nothing.
pub(crate) fn own_change<K: Resource>(obj: &K) -> u64 {
    let m = obj.meta();
    let owners: Vec<_> = m
        .owner_references
        .iter()
        .flatten()
        .map(|o| (&o.kind, &o.name, &o.uid))
        .collect();
    fingerprint(&(
        &m.uid,
        m.generation,
        m.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
        &m.finalizers,
        &m.labels,
        &m.annotations,
        owners,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::{ArcWake, waker};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    fn config_map(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl ArcWake for Wakes {
        fn wake_by_ref(this: &Arc<Self>) {
            this.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Why the fan-out is ours (the module's comment): kube-runtime's shared reflector skips an
    /// object deleted before its subscriber read it with a `Pending` that nothing will wake, so
    /// the next object waits unseen. When this fails, kube-runtime has fixed it and its shared
    /// reflector can replace [`Feed`].
    #[tokio::test]
    async fn kubes_shared_reflector_stalls_a_subscriber_after_a_deletion() {
        let (_store, writer) = reflector::store_shared::<ConfigMap>(16);
        let mut subscriber = writer.subscribe().unwrap_or_else(|| panic!("shared store"));
        let events = futures::stream::iter([
            Ok(Event::Apply(config_map("gone"))),
            Ok(Event::Delete(config_map("gone"))),
            Ok(Event::Apply(config_map("next"))),
        ]);
        reflector::reflector(writer, events)
            .for_each(|_: watcher::Result<Event<ConfigMap>>| std::future::ready(()))
            .await;
        let wakes = Arc::new(Wakes::default());
        let waker = waker(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(
            subscriber.poll_next_unpin(&mut cx).is_pending(),
            "the deleted object"
        );
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "no wake-up comes for the next object, which is waiting"
        );
        assert!(matches!(
            subscriber.poll_next_unpin(&mut cx),
            Poll::Ready(Some(_))
        ));
    }
}
