//! What a MetalStackFirewallDeployment reconcile reads: the firewall made for it.

use super::{FINALIZER, Observed, Seen};
use crate::api::MetalStackFirewall;
use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::ownership::FIREWALL_DEPLOYMENT_LABEL;
use crate::reconciler::gates::is_externally_managed;
use crate::reconciler::writes::has_finalizer;
use crate::reconciler::{Context, During, Result};
use kube::ResourceExt;
use kube::api::ListParams;

pub async fn observe(fwd: &MetalStackFirewallDeployment, ctx: &Context) -> Result<Observed> {
    if is_externally_managed(fwd) {
        return Ok(Observed::Unmanaged);
    }
    let deleting = fwd.metadata.deletion_timestamp.is_some();
    if deleting && !has_finalizer(fwd, FINALIZER) {
        return Ok(Observed::Deleting(None));
    }
    let seen = Seen {
        firewall: firewall_for(fwd, ctx).await?,
    };
    Ok(match deleting {
        true => Observed::Deleting(Some(seen)),
        false => Observed::Live(Box::new(seen)),
    })
}

/// The MetalStackFirewall labelled with the deployment's name (the ready one, while a changed
/// spec rolls in), from the shared cache when the controllers fill it.
async fn firewall_for(
    fwd: &MetalStackFirewallDeployment,
    ctx: &Context,
) -> Result<Option<MetalStackFirewall>> {
    let ns = fwd.namespace().unwrap_or_default();
    let name = fwd.name_any();
    let made_for = |fw: &MetalStackFirewall| {
        fw.namespace().as_deref() == Some(ns.as_str())
            && fw.labels().get(FIREWALL_DEPLOYMENT_LABEL) == Some(&name)
    };
    let made: Vec<MetalStackFirewall> = match ctx.caches.get() {
        Some(stores) => stores
            .firewalls
            .state()
            .iter()
            .filter(|fw| made_for(fw))
            .map(|fw| fw.as_ref().clone())
            .collect(),
        None => {
            let selector = format!("{FIREWALL_DEPLOYMENT_LABEL}={name}");
            let list = ctx
                .api::<MetalStackFirewall>(&ns)
                .list(&ListParams::default().labels(&selector))
                .await
                .during(|| format!("listing the MetalStackFirewalls of deployment {ns}/{name}"))?;
            list.items.into_iter().filter(made_for).collect()
        }
    };
    // While a changed spec rolls in, the deployment reports the firewall that serves.
    // A firewall being deleted counts only while it is the last one.
    let staying = |fw: &&MetalStackFirewall| fw.metadata.deletion_timestamp.is_none();
    let ready = |fw: &&MetalStackFirewall| fw.status.as_ref().is_some_and(|s| s.ready);
    let serving = made.iter().filter(staying).find(ready);
    let serving = serving.or(made.iter().find(staying)).or(made.first());
    Ok(serving.cloned())
}
