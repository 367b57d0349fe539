//! The route table: one webhook per admitted kind and admission phase, in the kubebuilder path
//! scheme. The server mounts it and the webhook configurations are generated from it.

use super::admit::AdmissionPhase;
use super::kinds::AdmittedKind;
use crate::api::common::GROUP;

/// One webhook: a kind and the phase it is called in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub kind: AdmittedKind,
    pub phase: AdmissionPhase,
}

impl Route {
    pub fn path(&self) -> String {
        format!(
            "/{}-infrastructure-cluster-x-k8s-io-v1alpha4-{}",
            self.phase.verb(),
            self.kind.singular()
        )
    }

    /// The webhook's name in its configuration.
    pub(crate) fn webhook_name(&self) -> String {
        let verb = match self.phase {
            AdmissionPhase::Mutating => "default",
            AdmissionPhase::Validating => "validate",
        };
        format!("{verb}.{}.{GROUP}", self.kind.singular())
    }
}

/// Every webhook capms serves.
pub fn routes() -> Vec<Route> {
    AdmittedKind::ALL
        .iter()
        .flat_map(|&kind| {
            [AdmissionPhase::Mutating, AdmissionPhase::Validating]
                .map(|phase| Route { kind, phase })
        })
        .collect()
}
