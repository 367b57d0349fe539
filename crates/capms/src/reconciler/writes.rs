//! The writes every controller makes to its own objects: its finalizer, guarded against
//! concurrent writers, and the whole status in one server-side apply.

use super::{Error, Result};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Field manager of every write capms makes.
pub(crate) const FIELD_MANAGER: &str = "capms";

/// `Kind namespace/name`, as error messages name an object.
pub fn describe<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{} {}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// Maps the error of a JSON patch guarded by `test` operations: a failed test is answered with
/// a bare 422 (no kind, no causes; a real validation error names both) and means the object
/// changed since it was read.
fn guarded_patch_error(operation: String, e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s)
            if s.code == 422
                && s.details
                    .as_ref()
                    .is_none_or(|d| d.kind.is_empty() && d.causes.is_empty()) =>
        {
            Error::Changed { operation }
        }
        _ => Error::kube(operation, e),
    }
}

/// Does `obj` carry `finalizer`?
pub(crate) fn has_finalizer<K: Resource>(obj: &K, finalizer: &str) -> bool {
    obj.finalizers().iter().any(|f| f == finalizer)
}

/// Adds `finalizer` (guarded by resourceVersion against concurrent writers). Returns whether it
/// had to be added.
pub(crate) async fn ensure_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    if has_finalizer(obj, finalizer) {
        return Ok(false);
    }
    let rv = obj.resource_version().unwrap_or_default();
    let ops = if obj.meta().finalizers.is_none() {
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}
        ])
    } else {
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}
        ])
    };
    let operation = || format!("adding finalizer {finalizer} to {}", describe(obj));
    let patch: json_patch::Patch =
        serde_json::from_value(ops).map_err(|e| Error::Invalid(format!("{}: {e}", operation())))?;
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map_err(|e| guarded_patch_error(operation(), e))?;
    Ok(true)
}

/// Removes `finalizer`, guarded by a test of its position.
pub(crate) async fn remove_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let Some(index) = obj.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(());
    };
    let ops = serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")}
    ]);
    let operation = || format!("removing finalizer {finalizer} from {}", describe(obj));
    let patch: json_patch::Patch =
        serde_json::from_value(ops).map_err(|e| Error::Invalid(format!("{}: {e}", operation())))?;
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(guarded_patch_error(operation(), e)),
    }
}

/// Writes the whole status in one server-side apply: fields capms no longer sets go away.
pub(crate) async fn apply_status<K, S>(api: &Api<K>, obj: &K, status: &S) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize,
{
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    match api
        .patch_status(
            &obj.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Deleted meanwhile: nothing left to report on.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::kube(
            format!("writing the status of {}", describe(obj)),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconciler::Category;

    fn api_error(code: u16, details: serde_json::Value) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server rejected our request due to an error in our request",
            "reason": "Invalid", "details": details, "code": code
        }))
        .unwrap_or_else(|e| panic!("a Status: {e}"));
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn a_failed_patch_test_is_a_change_not_a_failure() {
        let op = || "adding finalizer f to MetalStackMachine ns/m".to_owned();
        // What kube-apiserver v1.36 answers when a `test` operation fails (captured).
        let stale = guarded_patch_error(op(), api_error(422, serde_json::json!({})));
        assert!(matches!(stale, Error::Changed { .. }));
        assert_eq!(stale.category(), Category::KubeConflict);
        assert!(stale.to_string().starts_with(&op()), "{stale}");
        // A validation error names the kind and the field; it stays an error.
        let invalid = guarded_patch_error(
            op(),
            api_error(
                422,
                serde_json::json!({"kind": "MetalStackMachine", "causes": [{"field": "spec.providerID"}]}),
            ),
        );
        assert_eq!(invalid.category(), Category::KubeApi);
        assert!(invalid.to_string().starts_with(&op()), "{invalid}");
        assert_eq!(
            guarded_patch_error(op(), api_error(403, serde_json::json!({}))).category(),
            Category::KubeApi
        );
    }
}
