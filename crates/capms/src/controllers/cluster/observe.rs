//! What a MetalStackCluster reconcile reads, in the order `decide` looks at it.

use super::model::{ClusterGate, EndpointSeen, FirewallSeen, Left, NetworkSeen, Observed, Stages};
use super::{FINALIZER, belongs_to};
use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{
    MetalStackCluster, MetalStackFirewall, MetalStackFirewallTemplate, MetalStackMachine,
};
use crate::capi::{CLUSTER_NAME_LABEL, Cluster};
use crate::networks;
use crate::ownership::{
    OwnerKind, allocated_by_capms, cluster_id, cluster_tag, has_owner_tags, identity_of,
    owner_tags, retired_machines,
};
use crate::reconciler::gates::{
    capi_owner, deletion_hands_off, is_externally_managed, paused_reason,
};
use crate::reconciler::writes::has_finalizer;
use crate::reconciler::{Context, During, Result};
use kube::ResourceExt;
use kube::api::ListParams;
use metal_api::types::{IpFindRequest, MachineFindRequest, Network, NetworkFindRequest};
use std::collections::BTreeMap;
use std::net::IpAddr;

fn identity(msc: &MetalStackCluster) -> BTreeMap<String, String> {
    identity_of(OwnerKind::Cluster, msc)
}

pub async fn observe(msc: &MetalStackCluster, ctx: &Context) -> Result<Observed> {
    if is_externally_managed(msc) {
        return Ok(Observed::Unmanaged);
    }
    if msc.metadata.deletion_timestamp.is_some() {
        if !has_finalizer(msc, FINALIZER) {
            return Ok(Observed::Deleting(None));
        }
        let cluster = capi_owner(msc, "Cluster");
        if deletion_hands_off(ctx, msc, cluster.as_deref()).await? {
            return Ok(Observed::HandsOff);
        }
        return Ok(Observed::Deleting(Some(Box::new(left(msc, ctx).await?))));
    }
    Ok(Observed::Live(Box::new(gate(msc, ctx).await?)))
}

/// The gates, in order: reads each one's facts and stops at the first that is closed.
async fn gate(msc: &MetalStackCluster, ctx: &Context) -> Result<ClusterGate> {
    let ns = msc.namespace().unwrap_or_default();
    let Some(owner) = capi_owner(msc, "Cluster") else {
        return Ok(ClusterGate::NoOwner);
    };
    let Some(cluster) = ctx.get::<Cluster>(&ns, &owner).await? else {
        return Ok(ClusterGate::NoCluster { owner });
    };
    if let Some(reason) = paused_reason(msc, Some(&cluster)) {
        return Ok(ClusterGate::Paused(reason));
    }
    if !has_finalizer(msc, FINALIZER) {
        return Ok(ClusterGate::NotTakenUp);
    }
    let stages = stages(msc, ctx, owner).await?;
    Ok(ClusterGate::Open(Box::new(stages)))
}

/// The provisioning stages, each read once the one before it is done.
async fn stages(msc: &MetalStackCluster, ctx: &Context, owner: String) -> Result<Stages> {
    // A running cluster reads from caches and records: credentials that stopped working (a
    // revoked or expired token, a key rotated away) show on it as the call refused with them.
    if let Some(refused) = ctx.metal_of(msc).await?.refused() {
        return Err(refused.into());
    }
    let mut stages = Stages {
        failure_domains: super::failure_domains::observe(msc, ctx, &owner).await?,
        owner,
        ..Stages::default()
    };
    let network = network(msc, ctx).await?;
    let done = matches!(
        network,
        NetworkSeen::Given { .. } | NetworkSeen::Allocated(_)
    );
    stages.network = Some(network);
    if !done {
        return Ok(stages);
    }
    let endpoint = endpoint(msc, ctx).await?;
    let done = !matches!(
        endpoint,
        EndpointSeen::Allocated { ip: None, .. }
            | EndpointSeen::Free { .. }
            | EndpointSeen::PublicNetworkUnusable(_)
    );
    stages.endpoint = Some(endpoint);
    if done && super::firewall::wants_firewall(&msc.spec) {
        stages.firewall = Some(firewall(msc, ctx).await?);
    }
    Ok(stages)
}

/// The private network: the one in spec.privateNetworkID, the one capms allocated before
/// (recorded in status, or found by its owner labels when that record was lost), or none yet.
async fn network(msc: &MetalStackCluster, ctx: &Context) -> Result<NetworkSeen> {
    let metal = ctx.metal_of(msc).await?;
    let spec = &msc.spec;
    if let Some(id) = &spec.private_network_id {
        return match metal.network(id).await {
            Ok(n) => Ok(NetworkSeen::Given {
                ours: allocated_for(msc, &n),
            }),
            Err(e) if e.is_not_found() => {
                let choices = match metal.networks().await {
                    Ok(all) => networks::private_choices(&all, &spec.project_id, &spec.partition),
                    Err(_) => "metal-api could not list the valid choices".into(),
                };
                Ok(NetworkSeen::GivenMissing { choices })
            }
            Err(e) => Err(e.into()),
        };
    }
    if let Some(id) = msc
        .status
        .as_ref()
        .and_then(|s| s.allocated_network_id.clone())
    {
        return Ok(NetworkSeen::Allocated(id));
    }
    let find = NetworkFindRequest {
        labels: Some(identity(msc)),
        partitionid: Some(spec.partition.clone()),
        projectid: Some(spec.project_id.clone()),
        ..Default::default()
    };
    let existing = metal.network_find(&find).await?;
    if existing.len() > 1 {
        tracing::warn!(
            count = existing.len(),
            "several networks carry this cluster's owner labels; using the first"
        );
    }
    Ok(existing
        .into_iter()
        .next()
        .map_or(NetworkSeen::Unallocated, |n| NetworkSeen::Allocated(n.id)))
}

/// Was the network allocated for this cluster, by capms or by the provider before it: in the
/// cluster's project, with the cluster's id label (`<namespace>.<name>`)?
fn allocated_for(msc: &MetalStackCluster, network: &Network) -> bool {
    let id = cluster_id(&msc.namespace().unwrap_or_default(), &msc.name_any());
    network.projectid == msc.spec.project_id
        && network.labels.get(metal_api::tags::CLUSTER_ID) == Some(&id)
}

/// The control-plane IP: allocated by capms when no host is given; for a given host, whether
/// it is an IP of the public network and who holds it. spec.controlPlaneIP is used as given.
async fn endpoint(msc: &MetalStackCluster, ctx: &Context) -> Result<EndpointSeen> {
    let metal = ctx.metal_of(msc).await?;
    let spec = &msc.spec;
    let host = spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.host.clone())
        .filter(|h| !h.is_empty());
    let marks = identity(msc);
    let Some(host) = host else {
        if spec.control_plane_ip.is_some() {
            return Ok(EndpointSeen::AsGiven);
        }
        let network = match public_network(msc, ctx).await? {
            Ok(network) => network.id,
            Err(message) => return Ok(EndpointSeen::PublicNetworkUnusable(message)),
        };
        let find = IpFindRequest {
            networkid: Some(network.clone()),
            tags: owner_tags(&marks),
            ..Default::default()
        };
        let ip = metal.ip_find(&find).await?.into_iter().next();
        let ip = ip.map(|ip| ip.ipaddress);
        return Ok(EndpointSeen::Allocated { network, ip });
    };
    let recorded = msc
        .status
        .as_ref()
        .and_then(|s| s.allocated_control_plane_ip.as_deref());
    if recorded == Some(host.as_str()) {
        return Ok(EndpointSeen::Recorded);
    }
    if spec.control_plane_ip.as_deref() == Some(host.as_str()) {
        return Ok(EndpointSeen::AsGiven);
    }
    let Ok(address) = host.parse::<IpAddr>() else {
        return Ok(EndpointSeen::AsGiven);
    };
    let public = match public_network(msc, ctx).await? {
        Ok(network) => network,
        Err(message) => return Ok(EndpointSeen::PublicNetworkUnusable(message)),
    };
    if !networks::contains(&public, address) {
        return Ok(EndpointSeen::AsGiven);
    }
    match metal.ip(&host).await {
        Ok(ip) if has_owner_tags(&ip.tags, &marks) => Ok(EndpointSeen::Reserved(ip.ipaddress)),
        Ok(_) => Ok(EndpointSeen::AsGiven),
        Err(e) if e.is_not_found() => Ok(EndpointSeen::Free { network: public.id }),
        Err(e) => Err(e.into()),
    }
}

/// The public network: spec.publicNetworkID, or metal-api's default network when it names
/// none. Err is what is wrong with it, after the field's name, with the valid choices.
async fn public_network(
    msc: &MetalStackCluster,
    ctx: &Context,
) -> Result<std::result::Result<Network, String>> {
    let metal = ctx.metal_of(msc).await?;
    let Some(id) = &msc.spec.public_network_id else {
        let all = metal.networks().await?;
        let default = networks::default_external(&all).cloned();
        return Ok(default.map_err(|e| e.to_string()));
    };
    match metal.network(id).await {
        Ok(n) => Ok(Ok(n)),
        Err(e) if e.is_not_found() => {
            let choices = match metal.networks().await {
                Ok(all) => networks::external_choices(&all),
                Err(_) => "metal-api could not list the valid choices".into(),
            };
            Ok(Err(networks::missing(id, &choices)))
        }
        Err(e) => Err(e.into()),
    }
}

/// The cluster's MetalStackFirewall and, when one is named, its firewall deployment and
/// template (or the names of those there are).
async fn firewall(msc: &MetalStackCluster, ctx: &Context) -> Result<FirewallSeen> {
    let ns = msc.namespace().unwrap_or_default();
    let firewalls = ctx.list::<MetalStackFirewall>(&ns).await?;
    let name = msc.name_any();
    let mut seen = FirewallSeen {
        firewalls: firewalls
            .into_iter()
            .filter(|f| belongs_to(f, &name))
            .collect(),
        now: jiff::Timestamp::now(),
        rollout_deadline: ctx.settings.firewall_rollout_deadline,
        ..Default::default()
    };
    let spec = &msc.spec;
    if spec.firewall_spec.is_some() {
        return Ok(seen);
    }
    let template = match (&spec.firewall_template_ref, &spec.firewall_deployment_ref) {
        (Some(reference), _) => Some(reference.name.clone()),
        (None, Some(reference)) => {
            let deployment = named::<MetalStackFirewallDeployment>(ctx, &ns, &reference.name);
            let deployment = deployment.await?;
            let template = deployment.as_ref().ok();
            let template = template.map(|d| d.spec.firewall_template_ref.name.clone());
            seen.deployment = Some(deployment);
            template
        }
        (None, None) => None,
    };
    if let Some(name) = template {
        seen.template = Some(named::<MetalStackFirewallTemplate>(ctx, &ns, &name).await?);
    }
    seen.newest_image = newest_image(msc, &seen, ctx).await?;
    Ok(seen)
}

/// For a firewall deployment with spec.autoUpdate.machineImage: the newest firewall image of the
/// template image's operating system and major.minor version, as metal-api resolves
/// `<os>-<major>.<minor>`, of the images that have not expired. Read from the catalog the
/// webhooks keep (refreshed every `--catalog-refresh`), not from metal-api on every reconcile.
async fn newest_image(
    msc: &MetalStackCluster,
    seen: &FirewallSeen,
    ctx: &Context,
) -> Result<Option<String>> {
    let Some(Ok(deployment)) = &seen.deployment else {
        return Ok(None);
    };
    let Some(Ok(template)) = &seen.template else {
        return Ok(None);
    };
    if !super::deployment::auto_updates(deployment) {
        return Ok(None);
    }
    let image = &template.spec.template.spec.image;
    let Some((os, version)) = metal_api::images::os_and_version(image) else {
        return Ok(None);
    };
    let now = jiff::Timestamp::now();
    // A catalog in which the template's image resolves to nothing is older than it: a fresher
    // one, so that it never offers an image older than the one the firewall has.
    let knows_image = |c: &metal_api::Catalog| {
        metal_api::images::resolve(image, c.images.iter().map(|i| i.id.as_str())).is_ok()
    };
    let catalog = ctx.catalog_of(msc).await?.knowing(knows_image).await;
    let fetched;
    let images = match &catalog {
        Ok(catalog) => &catalog.images,
        // Not within the catalog's wait: asked directly, so that its error is this reconcile's.
        Err(_) => {
            fetched = ctx.metal_of(msc).await?.images().await?;
            &fetched
        }
    };
    let current = images
        .iter()
        .filter(|i| i.has_feature("firewall") && i.expiration_date > now)
        .map(|i| i.id.as_str());
    let series = format!("{os}-{}.{}", version.major, version.minor);
    Ok(metal_api::images::resolve(&series, current)
        .ok()
        .map(str::to_owned))
}

/// The `K` named `name` in `ns`, or the names of those there are.
async fn named<K>(
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<std::result::Result<K, Vec<String>>>
where
    K: crate::cache::Stored
        + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    if let Some(found) = ctx.get::<K>(ns, name).await? {
        return Ok(Ok(found));
    }
    let names = crate::cache::names(&ctx.api::<K>(ns)).await;
    Ok(Err(names.during(|| {
        format!("listing the {}s of namespace {ns}", K::kind(&()))
    })?))
}

/// What is left to tear down, stopping at the first thing that must go before the rest.
async fn left(msc: &MetalStackCluster, ctx: &Context) -> Result<Left> {
    let ns = msc.namespace().unwrap_or_default();
    let mut left = Left::default();
    if let Some(cluster_name) = msc.labels().get(CLUSTER_NAME_LABEL) {
        let selector = format!("{CLUSTER_NAME_LABEL}={cluster_name}");
        let machines = ctx
            .api::<MetalStackMachine>(&ns)
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .during(|| format!("listing the MetalStackMachines of Cluster {ns}/{cluster_name}"))?;
        left.machines = machines.items.len();
        if left.machines > 0 {
            return Ok(left);
        }
    }
    left.retired = retired_left(msc, ctx).await?;
    if !left.retired.is_empty() {
        return Ok(left);
    }
    let name = msc.name_any();
    let firewalls = ctx.list::<MetalStackFirewall>(&ns).await?;
    left.firewalls = firewalls
        .iter()
        .filter(|f| belongs_to(f, &name))
        .map(|f| (f.name_any(), f.metadata.deletion_timestamp.is_some()))
        .collect();
    if !left.firewalls.is_empty() {
        return Ok(left);
    }
    left.ips = owned_ips(msc, ctx).await?;
    if left.ips.is_empty() {
        left.networks = owned_networks(msc, ctx).await?;
    }
    Ok(left)
}

/// The machines the cluster records as retired that metal-api still has allocated for one of
/// its MetalStackMachines (capms's marks): each with the MetalStackMachine's name.
async fn retired_left(msc: &MetalStackCluster, ctx: &Context) -> Result<Vec<(String, String)>> {
    let retired = retired_machines(msc);
    if retired.is_empty() {
        return Ok(Vec::new());
    }
    let ns = msc.namespace().unwrap_or_default();
    let find = MachineFindRequest {
        tags: vec![cluster_tag(&ns, &msc.name_any())],
        ..Default::default()
    };
    let metal = ctx.metal_of(msc).await?;
    let found = metal.machine_find_as::<metal_api::MachineSummary>(&find);
    let left = found.await?.into_iter().filter_map(|m| {
        let (kind, namespace, owner) = allocated_by_capms(&m.tags)?;
        let ours = kind == OwnerKind::Machine && namespace == ns && m.allocation.is_some();
        (ours && retired.contains(&m.id)).then_some((m.id, owner))
    });
    Ok(left.collect())
}

/// The control-plane IPs that still carry the cluster's owner tags: only those are ours.
async fn owned_ips(msc: &MetalStackCluster, ctx: &Context) -> Result<Vec<String>> {
    let metal = ctx.metal_of(msc).await?;
    let marks = identity(msc);
    let find = IpFindRequest {
        projectid: Some(msc.spec.project_id.clone()),
        tags: owner_tags(&marks),
        ..Default::default()
    };
    let found = metal.ip_find(&find).await?;
    let mut ips: Vec<String> = found
        .into_iter()
        .filter(|ip| has_owner_tags(&ip.tags, &marks))
        .map(|ip| ip.ipaddress)
        .collect();
    let recorded = msc
        .status
        .as_ref()
        .and_then(|s| s.allocated_control_plane_ip.clone());
    if let Some(address) = recorded.filter(|a| !ips.contains(a)) {
        match metal.ip(&address).await {
            Ok(ip) if has_owner_tags(&ip.tags, &marks) => ips.push(address),
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    ips.sort();
    Ok(ips)
}

/// The networks that still carry the cluster's owner labels: only those are ours.
async fn owned_networks(msc: &MetalStackCluster, ctx: &Context) -> Result<Vec<String>> {
    let metal = ctx.metal_of(msc).await?;
    let marks = identity(msc);
    let carries =
        |labels: &BTreeMap<String, String>| marks.iter().all(|(k, v)| labels.get(k) == Some(v));
    let find = NetworkFindRequest {
        labels: Some(marks.clone()),
        ..Default::default()
    };
    let found = metal.network_find(&find).await?;
    let mut ids: Vec<String> = found
        .into_iter()
        .filter(|n| carries(&n.labels))
        .map(|n| n.id)
        .collect();
    let recorded = msc
        .status
        .as_ref()
        .and_then(|s| s.allocated_network_id.clone());
    if let Some(id) = recorded.filter(|id| !ids.contains(id)) {
        match metal.network(&id).await {
            Ok(n) if carries(&n.labels) || allocated_for(msc, &n) => ids.push(id),
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    ids.sort();
    Ok(ids)
}
