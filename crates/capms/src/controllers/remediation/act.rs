//! The one step `decide` chose for a MetalStackRemediation, taken.

use super::decide::FINALIZER;
use super::model::RemediationStep;
use crate::api::MetalStackCluster;
use crate::api::remediation::MetalStackRemediation;
use crate::capi::Machine as CapiMachine;
use crate::reconciler::writes::{FIELD_MANAGER, describe, ensure_finalizer, remove_finalizer};
use crate::reconciler::{Context, During, Result};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use metal_api::types::PowerAction;

/// Takes the one step `decide` chose; a power action or reinstall is reported by an Event on
/// the remediation, whether metal-api took it or refused it.
pub async fn act(msr: &MetalStackRemediation, ctx: &Context, step: &RemediationStep) -> Result<()> {
    let ns = msr.namespace().unwrap_or_default();
    let api = ctx.api::<MetalStackRemediation>(&ns);
    let machines = ctx.api::<CapiMachine>(&ns);
    let name = msr.name_any();
    match step {
        RemediationStep::Nothing => Ok(()),
        RemediationStep::AddFinalizer => ensure_finalizer(&api, msr, FINALIZER).await.map(|_| ()),
        RemediationStep::PowerCycle(id) => {
            let metal = super::observe::metal_of(msr, ctx).await?;
            let result = metal.machine_power(id, PowerAction::Cycle).await;
            announce(
                ctx,
                msr,
                "PowerCycled",
                &format!("power-cycled machine {id}"),
                result,
            )
        }
        RemediationStep::Reinstall(id, image) => {
            let metal = super::observe::metal_of(msr, ctx).await?;
            let result = metal.machine_reinstall(id, image).await;
            let note = format!("reinstalling machine {id} with image {image}");
            announce(ctx, msr, "Reinstalling", &note, result)
        }
        RemediationStep::Conclude(patch) => {
            machines
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .during(|| format!("winding up the remediation of Machine {ns}/{name}"))?;
            Ok(())
        }
        RemediationStep::Retire {
            cluster,
            machine,
            record,
        } => {
            ctx.api::<MetalStackCluster>(&ns)
                .patch(cluster, &PatchParams::default(), &Patch::Merge(record))
                .await
                .during(|| {
                    format!(
                        "recording machine {machine} retired on MetalStackCluster {ns}/{cluster}"
                    )
                })?;
            let note = format!(
                "retired machine {machine}: it stays allocated, out of the pool, recorded on MetalStackCluster {ns}/{cluster}"
            );
            ctx.events.warn(msr, "MachineRetired", "Retire", note);
            Ok(())
        }
        RemediationStep::GiveUp(condition) => {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            machines
                .patch_status(&name, &params, &Patch::Apply(condition))
                .await
                .during(|| format!("handing Machine {ns}/{name} back for replacement"))?;
            let note = format!("gave up remediating Machine {ns}/{name}: its owner replaces it");
            ctx.events.warn(msr, "RemediationExhausted", "GiveUp", note);
            Ok(())
        }
        RemediationStep::RemoveFinalizer => remove_finalizer(&api, msr, FINALIZER).await,
    }
}

/// An Event for metal-api's answer to an attempt; its error is the reconcile's.
fn announce<T>(
    ctx: &Context,
    msr: &MetalStackRemediation,
    reason: &str,
    note: &str,
    result: std::result::Result<T, metal_api::Error>,
) -> Result<()> {
    match result {
        Ok(_) => {
            ctx.events.note(msr, reason, "Remediate", note.to_owned());
            Ok(())
        }
        Err(e) => {
            let note = format!("{}: metal-api refused: {e}", describe(msr));
            ctx.events.warn(msr, "RemediationFailed", "Remediate", note);
            Err(e.into())
        }
    }
}
