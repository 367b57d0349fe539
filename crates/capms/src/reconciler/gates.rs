//! The gates every reconcile passes before it acts: another controller managing the object, a
//! pause (the Cluster's or the object's own), and deletions capms must keep its hands off; and
//! an object's age, which says how long it has waited at one.

use super::conditions::{Conditions, Reason, Type};
use super::{Context, Result};
use crate::capi::{Cluster, DELETE_FOR_MOVE_ANNOTATION, MANAGED_BY_ANNOTATION, PAUSED_ANNOTATION};
use kube::{Resource, ResourceExt};
use std::time::Duration;

/// How long `obj` has existed at `now`; None without a creation time, or when `now` lies before
/// it.
pub fn age<K: Resource>(obj: &K, now: jiff::Timestamp) -> Option<Duration> {
    let created = obj.meta().creation_timestamp.as_ref()?.0;
    elapsed(created, now, Duration::ZERO)
}

/// How long before `now` `then` was. capms's clock may be a little behind the apiserver's, so
/// that an object seems created in the future: less than `skew` ahead counts as now, more as
/// no known time.
pub fn elapsed(then: jiff::Timestamp, now: jiff::Timestamp, skew: Duration) -> Option<Duration> {
    let since = now.duration_since(then);
    match Duration::try_from(since) {
        Ok(elapsed) => Some(elapsed),
        Err(_) if since.unsigned_abs() < skew => Some(Duration::ZERO),
        Err(_) => None,
    }
}

/// Is reconciliation paused, by the Cluster or by the object's own annotation?
pub(crate) fn paused_reason<K: Resource>(obj: &K, cluster: Option<&Cluster>) -> Option<String> {
    if cluster.is_some_and(|c| c.is_paused()) {
        return Some("Cluster spec.paused is true".into());
    }
    obj.annotations()
        .contains_key(PAUSED_ANNOTATION)
        .then(|| format!("{PAUSED_ANNOTATION} annotation is set"))
}

/// Must a deletion leave everything as it is? While the object or its Cluster is paused, and
/// when clusterctl move deletes the object from the source after moving it, the allocations
/// stay for whoever manages the object now: capms removes no finalizer and frees nothing.
pub(crate) async fn deletion_hands_off<K: Resource>(
    ctx: &Context,
    obj: &K,
    cluster_name: Option<&str>,
) -> Result<bool> {
    if obj.annotations().contains_key(DELETE_FOR_MOVE_ANNOTATION) {
        return Ok(true);
    }
    let cluster = match cluster_name {
        Some(name) => {
            let ns = obj.namespace().unwrap_or_default();
            ctx.get::<Cluster>(&ns, name).await?
        }
        None => None,
    };
    Ok(paused_reason(obj, cluster.as_ref()).is_some())
}

/// Keeps the `Paused` condition true to the cause (True with it, or False/NotPaused) and tells
/// whether reconciliation stops here.
pub(crate) fn record_pause<K: Resource>(
    conditions: &mut Conditions<'_>,
    obj: &K,
    cluster: Option<&Cluster>,
) -> bool {
    match paused_reason(obj, cluster) {
        Some(reason) => {
            conditions.set_true(Type::Paused, Reason::Paused, reason);
            true
        }
        None => {
            conditions.set_false(Type::Paused, Reason::NotPaused, "");
            false
        }
    }
}

/// Cluster API's managed-by annotation: another controller owns the object.
pub(crate) fn is_externally_managed<K: Resource>(obj: &K) -> bool {
    obj.annotations().contains_key(MANAGED_BY_ANNOTATION)
}

/// The name of the owner of `kind` in the `cluster.x-k8s.io` group, if any.
pub(crate) fn capi_owner<K: Resource>(obj: &K, kind: &str) -> Option<String> {
    obj.owner_references()
        .iter()
        .find(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|o| o.name.clone())
}
