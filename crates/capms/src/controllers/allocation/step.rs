//! The steps of an object that holds one machine it allocated (a MetalStackMachine, a
//! MetalStackFirewall): one definition, with what each step's write affects.

use crate::reconciler::Effect;
use crate::reconciler::writes::has_finalizer;
use kube::{Resource, ResourceExt};

/// A step of an object holding one allocated machine; `Request` is how it asks metal-api for
/// the machine.
#[derive(Debug, PartialEq, strum::IntoStaticStr, strum::VariantNames)]
pub enum AllocationStep<Request> {
    Nothing,
    Allocate(Box<Request>),
    /// Merge patch recording the machine on the object (its spec.providerID, a machine's rack
    /// and ASN labels) and, when the object does not carry it yet, capms's finalizer.
    Record(serde_json::Value),
    Free(String),
    RemoveFinalizer,
}

impl<Request> AllocationStep<Request> {
    /// What the step's write affects, for the engine.
    pub(crate) fn effect(&self) -> Effect {
        match self {
            AllocationStep::Nothing => Effect::Nothing,
            AllocationStep::Record(_) => Effect::OwnObject,
            AllocationStep::Allocate(_) | AllocationStep::Free(_) => Effect::MetalApi,
            AllocationStep::RemoveFinalizer => Effect::LetsGo,
        }
    }
}

/// The merge patch recording an allocated machine on `obj`: `naming` (the fields that name the
/// machine, None when the object has them already) and `finalizer` when `obj` lacks it. None
/// when there is nothing to write.
///
/// capms adds its finalizer here, in the write that names the machine, rather than in a write
/// of its own before allocating: each write to a MetalStackMachine wakes Cluster API's Machine
/// controller. An object deleted between the allocation and this write leaves its machine to
/// the orphan sweep, which frees what carries the owner marks of an object that is gone. A
/// merge patch replaces the finalizer list whole, so it carries the resourceVersion the list
/// was read at: if another writer changed the object since, the apiserver answers 409 Conflict
/// and the next look writes it again.
pub(crate) fn record_patch<K: Resource>(
    obj: &K,
    finalizer: &str,
    naming: Option<serde_json::Value>,
) -> Option<serde_json::Value> {
    if has_finalizer(obj, finalizer) {
        return naming;
    }
    let mut patch = naming.unwrap_or_else(|| serde_json::json!({}));
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(finalizer.to_owned());
    patch["metadata"]["finalizers"] = serde_json::json!(finalizers);
    if let Some(version) = obj.resource_version() {
        patch["metadata"]["resourceVersion"] = serde_json::json!(version);
    }
    Some(patch)
}
