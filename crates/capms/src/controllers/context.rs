//! What every controller shares: clients, the event recorders, per-object poll backoff, and the
//! helpers for conditions, owner tags, finalizers and status writes.

pub use super::category::Category;
pub use super::conditions::{Conditions, Reason, Type};

pub use crate::ownership::*;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::Duration;

/// Field manager of every write capms makes.
pub const FIELD_MANAGER: &str = "capms";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Metal(#[from] metal_api::Error),
    /// Something a person has to fix in a spec or in metal-api; retried with backoff.
    #[error("{0}")]
    Invalid(String),
    /// The object changed between capms reading it and a guarded write; the watch brings the
    /// newer version.
    #[error("the object changed while capms wrote to it; retrying with the newer version")]
    Changed,
}

impl Error {
    pub fn category(&self) -> Category {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => Category::KubeConflict,
            Error::Changed => Category::KubeConflict,
            Error::Kube(_) => Category::KubeApi,
            Error::Metal(e) => Category::Metal(e.category()),
            Error::Invalid(_) => Category::InvalidSpec,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Maps the error of a JSON patch guarded by `test` operations: a failed test is answered with
/// a bare 422 (no kind, no causes; a real validation error names both) and means the object
/// changed since it was read.
fn guarded_patch_error(e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s)
            if s.code == 422
                && s.details
                    .as_ref()
                    .is_none_or(|d| d.kind.is_empty() && d.causes.is_empty()) =>
        {
            Error::Changed
        }
        _ => Error::Kube(e),
    }
}

/// Settings every controller honours.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Only watch this namespace.
    pub namespace: Option<String>,
    /// Only reconcile objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    /// Concurrent reconciles per controller.
    pub concurrency: u16,
    /// How often a provisioned object is looked at again without an event (what finds a
    /// machine freed outside capms).
    pub sync_period: std::time::Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: None,
            watch_filter: None,
            concurrency: 0,
            sync_period: super::step::DEFAULT_SYNC_PERIOD,
        }
    }
}

pub struct Context {
    pub client: kube::Client,
    pub metal: metal_api::Client,
    /// Publishes the Warnings: a failure repeating within minutes (metal-api out of machines,
    /// say) becomes one Event whose count grows, not an Event per attempt.
    warnings: Recorder,
    reporter: Reporter,
    pub settings: Settings,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Each cluster's machines as metal-api last listed them.
    pub fleet: super::fleet::Fleet,
    /// The watch caches, once the controllers run; without them (a reconcile under test) reads
    /// go to the apiserver.
    pub stores: super::feeds::Caches,
    /// The objects capms wrote to lately: their older copies wait for the watch.
    pub own_writes: super::own_writes::OwnWrites,
    polls: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(
        client: kube::Client,
        metal: metal_api::Client,
        settings: Settings,
        instance: Option<String>,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
    ) -> Context {
        let reporter = Reporter {
            controller: "capms".into(),
            instance,
        };
        Context {
            warnings: Recorder::new(client.clone(), reporter.clone()),
            reporter,
            client,
            metal,
            settings,
            metrics,
            fleet: Default::default(),
            stores: Default::default(),
            own_writes: Default::default(),
            polls: Mutex::new(HashMap::new()),
        }
    }

    /// The `K` named `name` in `namespace`: from the watch cache, which holds every object the
    /// controllers follow, else (no cache: a reconcile under test) from the apiserver.
    pub async fn get<K>(&self, namespace: &str, name: &str) -> Result<Option<K>>
    where
        K: super::feeds::Stored
            + Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + DeserializeOwned
            + Debug,
    {
        Ok(super::feeds::read(&self.stores, &self.client, namespace, name).await?)
    }

    /// Api for a namespaced kind in `namespace`.
    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Next wait while polling metal-api for progress: 2 s, 4 s, 8 s, 16 s, then 30 s.
    pub fn next_poll(&self, key: &str) -> Duration {
        let mut polls = self.polls.lock().unwrap_or_else(|p| p.into_inner());
        let n = polls.entry(key.to_owned()).or_default();
        *n = n.saturating_add(1);
        poll_interval(*n)
    }

    pub fn reset_poll(&self, key: &str) {
        self.polls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Publishes a Normal Event on `obj`.
    pub fn note<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(obj, EventType::Normal, reason, action, note)
    }

    /// Publishes a Warning Event on `obj`.
    pub fn warn<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(obj, EventType::Warning, reason, action, note)
    }

    /// Sends the Event on its own task: the reconcile that took the step goes on without
    /// waiting for the apiserver's answer (under load a round trip of 0.1-0.5 s, in the middle
    /// of a machine's allocation). A failure to publish is logged, never fatal.
    fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        // A Normal Event reports a step taken once per object (allocated, freed, created), so
        // it goes out without the shared recorder: that one keeps every Event it published for
        // six minutes to count repeats, which at 1,000 machines was about 3 MiB per round of
        // allocations or frees, for Events that never repeat.
        let recorder = match type_ {
            EventType::Warning => self.warnings.clone(),
            EventType::Normal => Recorder::new(self.client.clone(), self.reporter.clone()),
        };
        let object = obj.object_ref(&());
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &object).await {
                tracing::warn!(error = %e, reason = %event.reason, "publishing an event failed");
            }
        });
    }
}

/// The bounded, growing poll interval after `attempt` unsuccessful polls.
pub fn poll_interval(attempt: u32) -> Duration {
    Duration::from_secs((1u64 << attempt.clamp(1, 5)).min(30))
}

/// Adds `finalizer` (guarded by resourceVersion against concurrent writers). Returns whether it
/// had to be added.
pub async fn ensure_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if obj.finalizers().iter().any(|f| f == finalizer) {
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
    let patch: json_patch::Patch =
        serde_json::from_value(ops).map_err(|e| Error::Invalid(e.to_string()))?;
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map_err(guarded_patch_error)?;
    Ok(true)
}

/// Removes `finalizer`, guarded by a test of its position.
pub async fn remove_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let Some(index) = obj.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(());
    };
    let ops = serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")}
    ]);
    let patch: json_patch::Patch =
        serde_json::from_value(ops).map_err(|e| Error::Invalid(e.to_string()))?;
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
        Err(e) => Err(guarded_patch_error(e)),
    }
}

/// Writes the whole status in one server-side apply: fields capms no longer sets go away.
pub async fn apply_status<K, S>(api: &Api<K>, obj: &K, status: &S) -> Result<()>
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
        Err(e) => Err(e.into()),
    }
}

/// Is reconciliation paused, by the Cluster or by the object's own annotation?
pub fn paused_reason<K: Resource>(
    obj: &K,
    cluster: Option<&crate::capi::Cluster>,
) -> Option<String> {
    if cluster.is_some_and(|c| c.is_paused()) {
        return Some("Cluster spec.paused is true".into());
    }
    obj.annotations()
        .contains_key(crate::capi::PAUSED_ANNOTATION)
        .then(|| format!("{} annotation is set", crate::capi::PAUSED_ANNOTATION))
}

/// Must a deletion leave everything as it is? While the object or its Cluster is paused, and
/// when clusterctl move deletes the object from the source after moving it, the allocations
/// stay for whoever manages the object now: capms removes no finalizer and frees nothing.
pub async fn deletion_hands_off<K: Resource>(
    ctx: &Context,
    obj: &K,
    cluster_name: Option<&str>,
) -> Result<bool> {
    let annotations = obj.annotations();
    if annotations.contains_key(crate::capi::DELETE_FOR_MOVE_ANNOTATION) {
        return Ok(true);
    }
    let cluster = match cluster_name {
        Some(name) => {
            let ns = obj.namespace().unwrap_or_default();
            ctx.get::<crate::capi::Cluster>(&ns, name).await?
        }
        None => None,
    };
    Ok(paused_reason(obj, cluster.as_ref()).is_some())
}

/// Keeps the `Paused` condition true to the cause (True with it, or False/NotPaused) and tells
/// whether reconciliation stops here.
pub fn record_pause<K: Resource>(
    conditions: &mut Conditions<'_>,
    obj: &K,
    cluster: Option<&crate::capi::Cluster>,
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

pub fn is_externally_managed<K: Resource>(obj: &K) -> bool {
    obj.annotations()
        .contains_key(crate::capi::MANAGED_BY_ANNOTATION)
}

/// The name of the owner of `kind` in the `cluster.x-k8s.io` group, if any.
pub fn capi_owner<K: Resource>(obj: &K, kind: &str) -> Option<String> {
    obj.owner_references()
        .iter()
        .find(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|o| o.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, details: serde_json::Value) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server rejected our request due to an error in our request",
            "reason": "Invalid", "details": details, "code": code
        }))
        .expect("a Status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn a_failed_patch_test_is_a_change_not_a_failure() {
        // What kube-apiserver v1.36 answers when a `test` operation fails (captured).
        let stale = guarded_patch_error(api_error(422, serde_json::json!({})));
        assert!(matches!(stale, Error::Changed));
        assert_eq!(stale.category(), Category::KubeConflict);
        // A validation error names the kind and the field; it stays an error.
        let invalid = guarded_patch_error(api_error(
            422,
            serde_json::json!({"kind": "MetalStackMachine", "causes": [{"field": "spec.providerID"}]}),
        ));
        assert_eq!(invalid.category(), Category::KubeApi);
        assert_eq!(
            guarded_patch_error(api_error(403, serde_json::json!({}))).category(),
            Category::KubeApi
        );
    }

    #[test]
    fn poll_interval_grows_and_is_bounded() {
        let waits: Vec<u64> = (0..8).map(|n| poll_interval(n).as_secs()).collect();
        assert_eq!(waits, [2, 2, 4, 8, 16, 30, 30, 30]);
    }
}
