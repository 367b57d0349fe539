//! The adapter between kube-runtime's controller and capms's work-queue metrics. kube-runtime's
//! scheduler does not expose its queue, so capms keeps the books beside it
//! ([`crate::metrics::WorkQueues`]): an object waits from the first watch event that wakes it
//! until its reconcile starts. Every stream that wakes a controller goes through here.

use crate::cache::watch::Followed;
use crate::metrics::WorkQueues;
use futures::{Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::sync::Arc;

/// An object's key in its controller's work queue.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

/// `mapper`, recording every object it wakes in its controller's work queue.
pub fn counted<S, K, I>(
    queues: &WorkQueues,
    mapper: impl Fn(S) -> I + Send + Sync + 'static,
) -> impl Fn(S) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()>,
    I: IntoIterator<Item = ObjectRef<K>>,
{
    let queues = queues.clone();
    move |source| {
        let woken: Vec<ObjectRef<K>> = mapper(source).into_iter().collect();
        for r in &woken {
            queues.woken(&K::kind(&()), key(r.namespace.as_deref(), &r.name));
        }
        woken
    }
}

/// `stream` of the controller's own objects, recording each in its work queue.
pub(crate) fn counted_own<K>(
    queues: &WorkQueues,
    stream: Followed<K>,
) -> impl Stream<Item = Arc<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let queues = queues.clone();
    stream.inspect(move |obj| {
        queues.woken(
            &K::kind(&()),
            key(obj.meta().namespace.as_deref(), &obj.name_any()),
        );
    })
}

/// `owners` (namespace, name) of kind `K` to wake, recorded in their work queue.
pub(crate) fn counted_refs<K>(
    queues: &WorkQueues,
    owners: impl Stream<Item = (String, String)> + Send + 'static,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Resource<DynamicType = ()>,
{
    let queues = queues.clone();
    owners.map(move |(namespace, name)| {
        queues.woken(&K::kind(&()), key(Some(&namespace), &name));
        ObjectRef::new(&name).within(&namespace)
    })
}
