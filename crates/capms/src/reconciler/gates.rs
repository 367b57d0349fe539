//! The gates every reconcile passes before it acts: another controller managing the object, a
//! pause (the Cluster's or the object's own), and deletions capms must keep its hands off.

use super::conditions::{Conditions, Reason, Type};
use super::{Context, Result};
use crate::capi::{Cluster, DELETE_FOR_MOVE_ANNOTATION, MANAGED_BY_ANNOTATION, PAUSED_ANNOTATION};
use kube::{Resource, ResourceExt};

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

/// The `Paused` condition of a pause observe already decided (`paused_reason`): True with its
/// reason, or False/NotPaused.
pub(crate) fn report_pause(conditions: &mut Conditions<'_>, reason: Option<&str>) {
    match reason {
        Some(reason) => conditions.set_true(Type::Paused, Reason::Paused, reason),
        None => conditions.set_false(Type::Paused, Reason::NotPaused, ""),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{MetalStackMachine, MetalStackMachineSpec};
    use crate::capi::ClusterSpec;

    #[test]
    fn a_pause_is_the_clusters_or_the_objects_own() {
        let cluster = |paused| {
            Cluster::new(
                "prod",
                ClusterSpec {
                    paused: Some(paused),
                    ..Default::default()
                },
            )
        };
        let mut obj = MetalStackMachine::new("m", MetalStackMachineSpec::default());
        assert_eq!(paused_reason(&obj, Some(&cluster(false))), None);
        assert_eq!(paused_reason(&obj, None), None);
        let by_cluster = paused_reason(&obj, Some(&cluster(true)));
        assert_eq!(by_cluster.as_deref(), Some("Cluster spec.paused is true"));
        obj.metadata.annotations = Some([(PAUSED_ANNOTATION.to_owned(), String::new())].into());
        let own = paused_reason(&obj, Some(&cluster(false))).unwrap_or_default();
        assert!(own.contains(PAUSED_ANNOTATION), "{own}");
    }
}
