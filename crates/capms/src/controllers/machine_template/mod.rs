//! MetalStackMachineTemplate: what a node made from the template would have (its capacity,
//! architecture and operating system, from metal-api's size and image), in the template's
//! status, for the cluster-autoscaler to scale a MachineDeployment up from zero machines.
//!
//! `observe` reads the size and image from the catalog, `decide` turns them into the status
//! without I/O, and the engine writes the status; there is no other write. `watches` says what
//! wakes a template: its own changes, and a catalog refresh that changed a size or an image.

mod decide;
mod observe;
#[cfg(test)]
mod tests;
pub(crate) mod watches;

use crate::api::{MetalStackMachineTemplate, MetalStackMachineTemplateStatus};
use crate::reconciler::{Context, Decision, Effect, Error, Reconciler, Requeue, Result, failure};
use metal_api::types::{Image, Size};

/// What observe read: the template's size and image as metal-api has them.
pub(crate) type Observed = crate::reconciler::Observed<Seen, ()>;

/// The size and the image the template names, or what metal-api offers instead.
#[derive(Debug)]
pub(crate) struct Seen {
    pub size: std::result::Result<Size, Vec<String>>,
    /// The image the template's image resolves to, or the machine images there are.
    pub image: std::result::Result<Image, Vec<String>>,
}

/// A template's status is its only write.
#[derive(Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantNames)]
pub enum TemplateStep {
    Nothing,
}

pub(crate) type TemplateDecision = Decision<TemplateStep, MetalStackMachineTemplateStatus>;

/// The MetalStackMachineTemplate controller's parts.
pub(crate) struct MachineTemplates;

impl Reconciler for MachineTemplates {
    type Object = MetalStackMachineTemplate;
    type Observed = Observed;
    type Step = TemplateStep;
    type Status = MetalStackMachineTemplateStatus;

    fn status(obj: &MetalStackMachineTemplate) -> Option<&MetalStackMachineTemplateStatus> {
        obj.status.as_ref()
    }

    async fn observe(obj: &MetalStackMachineTemplate, ctx: &Context) -> Result<Observed> {
        observe::observe(obj, ctx).await
    }

    fn decide(obj: &MetalStackMachineTemplate, observed: &Observed) -> TemplateDecision {
        decide::decide(obj, observed)
    }

    async fn act(_: &MetalStackMachineTemplate, _: &Context, _: &TemplateStep) -> Result<()> {
        Ok(())
    }

    fn step_name(step: &TemplateStep) -> &'static str {
        step.into()
    }

    fn effect(_: &TemplateStep) -> Effect {
        Effect::Nothing
    }

    fn failed(
        obj: &MetalStackMachineTemplate,
        status: MetalStackMachineTemplateStatus,
        error: Error,
        step: Option<&TemplateStep>,
    ) -> (MetalStackMachineTemplateStatus, Result<Requeue>) {
        let generation = obj.metadata.generation;
        failure::<Self>(status, error, step, |mut s, e| {
            decide::report_failure(&mut s, generation, e);
            s
        })
    }
}
