//! The steps of an object that holds one machine it allocated (a MetalStackMachine, a
//! MetalStackFirewall): one definition, with what each step's write affects.

use crate::reconciler::Effect;

/// A step of an object holding one allocated machine; `Request` is how it asks metal-api for
/// the machine.
#[derive(Debug, PartialEq, strum::IntoStaticStr, strum::VariantNames)]
pub enum AllocationStep<Request> {
    Nothing,
    AddFinalizer,
    Allocate(Box<Request>),
    /// Merge patch naming the machine (spec.providerID, and a machine's rack and ASN labels).
    Record(serde_json::Value),
    Free(String),
    RemoveFinalizer,
}

impl<Request> AllocationStep<Request> {
    /// What the step's write affects, for the engine.
    pub(crate) fn effect(&self) -> Effect {
        match self {
            AllocationStep::Nothing => Effect::Nothing,
            AllocationStep::AddFinalizer | AllocationStep::Record(_) => Effect::OwnObject,
            AllocationStep::Allocate(_) | AllocationStep::Free(_) => Effect::MetalApi,
            AllocationStep::RemoveFinalizer => Effect::LetsGo,
        }
    }
}
