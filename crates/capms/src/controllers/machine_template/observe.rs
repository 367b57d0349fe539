//! What a MetalStackMachineTemplate reconcile reads: its size and image, from the catalog of
//! its metal-api's master data that admission reads too.

use super::{Observed, Seen};
use crate::api::{MetalStackCluster, MetalStackMachineTemplate};
use crate::cache::catalogs::agreed;
use crate::capi::CLUSTER_NAME_LABEL;
use crate::reconciler::gates::is_externally_managed;
use crate::reconciler::{Context, Result};
use kube::ResourceExt;
use metal_api::Catalog;
use metal_api::types::FEATURE_MACHINE;

pub(super) async fn observe(
    template: &MetalStackMachineTemplate,
    ctx: &Context,
) -> Result<Observed> {
    if is_externally_managed(template) || template.metadata.deletion_timestamp.is_some() {
        return Ok(Observed::Unmanaged);
    }
    let spec = &template.spec.template.spec;
    // A catalog that lacks the size or the image may be older than they are: a fresher one.
    let knows = |c: &Catalog| {
        let seen = seen(c, &spec.machine_type, &spec.image);
        seen.size.is_ok() && seen.image.is_ok()
    };
    let ns = template.namespace().unwrap_or_default();
    let secret = credentials(template, &ns, ctx).await?;
    let seen = match ctx
        .catalogs
        .of(&ns, secret.as_deref())
        .await?
        .knowing(knows)
        .await
    {
        Ok(catalog) => seen(&catalog, &spec.machine_type, &spec.image),
        // Not within the catalog's wait: asked directly, so that its error is this reconcile's.
        Err(_) => {
            let metal = ctx.metal.of(&ns, secret.as_deref()).await?;
            let (sizes, images) = tokio::try_join!(metal.sizes(), metal.images())?;
            let catalog = Catalog {
                sizes,
                images,
                ..Catalog::default()
            };
            seen(&catalog, &spec.machine_type, &spec.image)
        }
    };
    Ok(Observed::Live(Box::new(seen)))
}

/// The credentials Secret of the metal-api whose machines the template describes: its
/// cluster's (the cluster-name label), else the one every MetalStackCluster of its namespace
/// names; capms's own when they differ or none names one.
async fn credentials(
    template: &MetalStackMachineTemplate,
    ns: &str,
    ctx: &Context,
) -> Result<Option<String>> {
    let of = |m: &MetalStackCluster| m.spec.credentials_ref.as_ref().map(|r| r.name.clone());
    if let Some(cluster) = template.labels().get(CLUSTER_NAME_LABEL)
        && let Some(msc) = ctx.metal_stack_cluster(ns, cluster).await?
    {
        return Ok(of(&msc));
    }
    let named = ctx.pick(ns, |m: &MetalStackCluster| Some(of(m))).await?;
    Ok(agreed(named.into_iter().collect()).unwrap_or(None))
}

/// The size named `size` and the machine image `image` resolves to in `catalog`, or the ones
/// there are.
fn seen(catalog: &Catalog, size: &str, image: &str) -> Seen {
    let sizes = &catalog.sizes;
    let size = match sizes.iter().find(|s| s.id == size) {
        Some(s) => Ok(s.clone()),
        None => Err(sizes.iter().map(|s| s.id.clone()).collect()),
    };
    let machine_images = catalog
        .images
        .iter()
        .filter(|i| i.has_feature(FEATURE_MACHINE));
    let resolved = metal_api::images::resolve(image, machine_images.clone().map(|i| i.id.as_str()));
    let image = match resolved {
        Ok(id) => machine_images
            .clone()
            .find(|i| i.id == id)
            .cloned()
            .ok_or_else(Vec::new),
        Err(_) => Err(machine_images.map(|i| i.id.clone()).collect()),
    };
    Seen { size, image }
}
