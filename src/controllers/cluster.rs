//! MetalStackCluster: the cluster's private network, control-plane IP and firewall.

use super::context::*;
use crate::api::{
    ApiEndpoint, Initialization, MetalStackCluster, MetalStackClusterStatus, MetalStackFirewall,
    MetalStackFirewallSpec, MetalStackFirewallTemplate, MetalStackMachine, TemplateMeta,
};
use crate::capi::{CLUSTER_NAME_LABEL, Cluster};
use crate::metal::cidr::Cidr;
use crate::metal::types::{
    IP_TYPE_EPHEMERAL, IP_TYPE_STATIC, IpAllocateRequest, IpFindRequest, NetworkAllocateRequest,
    NetworkFindRequest,
};
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

pub const FINALIZER: &str = "metal-stack.infrastructure.cluster.x-k8s.io/cluster";
/// Tag of the control-plane IP, next to the owner tags.
const PURPOSE_CONTROL_PLANE: &str =
    "metal-stack.infrastructure.cluster.x-k8s.io/purpose=control-plane";
/// metal-lib's cluster id tag/label key.
pub const CLUSTER_ID_KEY: &str = "cluster.metal-stack.io/id";

/// Name of the MetalStackFirewall a MetalStackCluster creates.
pub fn firewall_name(cluster: &str) -> String {
    format!("{cluster}-firewall")
}

/// Cluster API's annotations naming the template an object was cloned from.
const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
const CLONED_FROM_GROUPKIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";

/// The MetalStackFirewall a cluster creates: its spec from the cluster's firewallSpec or from its
/// firewall template, the template's labels and annotations, and where it was cloned from.
pub fn plan_firewall(
    msc: &MetalStackCluster,
    cluster_name: &str,
    spec: MetalStackFirewallSpec,
    template: Option<(&str, Option<&TemplateMeta>)>,
) -> MetalStackFirewall {
    let mut labels = std::collections::BTreeMap::new();
    let mut annotations = std::collections::BTreeMap::new();
    if let Some((template_name, meta)) = template {
        if let Some(meta) = meta {
            labels.extend(meta.labels.clone());
            annotations.extend(meta.annotations.clone());
        }
        annotations.insert(CLONED_FROM_NAME.to_owned(), template_name.to_owned());
        annotations.insert(
            CLONED_FROM_GROUPKIND.to_owned(),
            format!("MetalStackFirewallTemplate.{}", crate::api::common::GROUP),
        );
    }
    // The cluster-name label is what ties the firewall to its Cluster; a template cannot
    // override it.
    labels.insert(CLUSTER_NAME_LABEL.to_owned(), cluster_name.to_owned());
    MetalStackFirewall {
        metadata: ObjectMeta {
            name: Some(firewall_name(&msc.name_any())),
            namespace: msc.namespace(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: msc.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

enum Progress {
    Ready,
    Waiting(Duration),
}

pub async fn reconcile(msc: Arc<MetalStackCluster>, ctx: Arc<Context>) -> Result<Action> {
    if is_externally_managed(msc.as_ref()) {
        return Ok(Action::await_change());
    }
    let ns = msc.namespace().unwrap_or_default();
    let api = ctx.api::<MetalStackCluster>(&ns);
    let generation = msc.metadata.generation;
    let mut status = msc.status.clone().unwrap_or_default();

    if msc.metadata.deletion_timestamp.is_some() {
        return cleanup(&msc, &ctx, status).await;
    }
    let Some(cluster_name) = capi_owner(msc.as_ref(), "Cluster") else {
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "WaitingForClusterOwnerRef",
            "waiting for Cluster API to set the owning Cluster",
            generation,
        );
        apply_status(&api, &msc, &status).await?;
        return Ok(Action::await_change());
    };
    let Some(cluster) = ctx.api::<Cluster>(&ns).get_opt(&cluster_name).await? else {
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "WaitingForCluster",
            format!("Cluster {ns}/{cluster_name} does not exist (yet)"),
            generation,
        );
        apply_status(&api, &msc, &status).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    if record_pause(
        &mut status.conditions,
        msc.as_ref(),
        Some(&cluster),
        generation,
    ) {
        apply_status(&api, &msc, &status).await?;
        return Ok(Action::await_change());
    }
    if ensure_finalizer(&api, msc.as_ref(), FINALIZER).await? {
        return Ok(Action::await_change());
    }

    let result = provision(&msc, &cluster_name, &ctx, &mut status).await;
    let action = match &result {
        Ok(Progress::Ready) => {
            ctx.reset_poll(&uid(&msc));
            status.ready = true;
            status.initialization = Some(Initialization {
                provisioned: Some(true),
            });
            status.failure_reason = None;
            status.failure_message = None;
            set_condition(
                &mut status.conditions,
                "Ready",
                true,
                "Provisioned",
                "network, control-plane IP and firewall are ready",
                generation,
            );
            Action::requeue(Duration::from_secs(300))
        }
        Ok(Progress::Waiting(after)) => {
            set_condition(
                &mut status.conditions,
                "Ready",
                false,
                "Provisioning",
                "provisioning; see the other conditions",
                generation,
            );
            Action::requeue(*after)
        }
        Err(e) => {
            set_condition(
                &mut status.conditions,
                "Ready",
                false,
                e.category().reason(),
                e.to_string(),
                generation,
            );
            // The error is returned below and error_policy picks the retry (and advances the
            // backoff once); this action is never used.
            Action::await_change()
        }
    };
    if !status.ready {
        status.initialization = None;
    }
    apply_status(&api, &msc, &status).await?;
    result.map(|_| action)
}

fn uid(msc: &MetalStackCluster) -> String {
    msc.uid().unwrap_or_default()
}

fn marks(msc: &MetalStackCluster) -> std::collections::BTreeMap<String, String> {
    owner_marks_of(OwnerKind::Cluster, msc)
}

async fn provision(
    msc: &MetalStackCluster,
    cluster_name: &str,
    ctx: &Context,
    status: &mut MetalStackClusterStatus,
) -> Result<Progress> {
    let generation = msc.metadata.generation;
    match ensure_network(msc, ctx, status).await {
        Ok(id) => set_condition(
            &mut status.conditions,
            "NetworkReady",
            true,
            "NetworkReady",
            format!("private network {id}"),
            generation,
        ),
        Err(e) => {
            set_condition(
                &mut status.conditions,
                "NetworkReady",
                false,
                e.category().reason(),
                e.to_string(),
                generation,
            );
            return Err(e);
        }
    }
    match ensure_control_plane_ip(msc, ctx, status).await {
        Ok(endpoint) => set_condition(
            &mut status.conditions,
            "ControlPlaneIPReady",
            true,
            "ControlPlaneIPReady",
            format!("control-plane endpoint {endpoint}"),
            generation,
        ),
        Err(e) => {
            set_condition(
                &mut status.conditions,
                "ControlPlaneIPReady",
                false,
                e.category().reason(),
                e.to_string(),
                generation,
            );
            return Err(e);
        }
    }
    if msc.spec.firewall_spec.is_none() && msc.spec.firewall_template_ref.is_none() {
        set_condition(
            &mut status.conditions,
            "FirewallReady",
            true,
            "NoFirewall",
            "neither spec.firewallSpec nor spec.firewallTemplateRef is set; no firewall is created",
            generation,
        );
        return Ok(Progress::Ready);
    }
    let ns = msc.namespace().unwrap_or_default();
    let fw_api = ctx.api::<MetalStackFirewall>(&ns);
    let name = firewall_name(&msc.name_any());
    match fw_api.get_opt(&name).await? {
        None => {
            let Some(firewall) = firewall_to_create(msc, cluster_name, ctx, status).await? else {
                // The template does not exist (yet). Its creation triggers a reconcile through
                // the template watch; this is only a safety net.
                return Ok(Progress::Waiting(Duration::from_secs(300)));
            };
            match fw_api
                .create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.into()),
                        ..Default::default()
                    },
                    &firewall,
                )
                .await
            {
                Ok(_) => {
                    ctx.event(
                        msc,
                        false,
                        "FirewallCreated",
                        "CreateFirewall",
                        format!("created MetalStackFirewall {name}"),
                    )
                    .await
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            set_condition(
                &mut status.conditions,
                "FirewallReady",
                false,
                "FirewallCreated",
                format!("waiting for MetalStackFirewall {name} to become ready"),
                generation,
            );
            Ok(Progress::Waiting(Duration::from_secs(60)))
        }
        Some(fw) if fw.status.as_ref().is_some_and(|s| s.ready) => {
            set_condition(
                &mut status.conditions,
                "FirewallReady",
                true,
                "FirewallReady",
                format!("MetalStackFirewall {name} is ready"),
                generation,
            );
            Ok(Progress::Ready)
        }
        Some(_) => {
            set_condition(
                &mut status.conditions,
                "FirewallReady",
                false,
                "WaitingForFirewall",
                format!("waiting for MetalStackFirewall {name} to become ready"),
                generation,
            );
            // The firewall's status changes trigger a reconcile; this is only a safety net.
            Ok(Progress::Waiting(Duration::from_secs(60)))
        }
    }
}

/// The MetalStackClusters (of those in `clusters`) whose firewallTemplateRef names `template`.
pub fn clusters_using_template(
    template: &MetalStackFirewallTemplate,
    clusters: &[Arc<MetalStackCluster>],
) -> Vec<kube::runtime::reflector::ObjectRef<MetalStackCluster>> {
    let name = template.name_any();
    clusters
        .iter()
        .filter(|c| c.namespace() == template.namespace())
        .filter(|c| {
            c.spec
                .firewall_template_ref
                .as_ref()
                .is_some_and(|r| r.name == name)
        })
        .map(|c| kube::runtime::reflector::ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// The firewall to create from the inline spec or the named template; None (with the
/// FirewallReady condition saying why) while the template does not exist.
async fn firewall_to_create(
    msc: &MetalStackCluster,
    cluster_name: &str,
    ctx: &Context,
    status: &mut MetalStackClusterStatus,
) -> Result<Option<MetalStackFirewall>> {
    if let Some(spec) = &msc.spec.firewall_spec {
        return Ok(Some(plan_firewall(msc, cluster_name, spec.clone(), None)));
    }
    let Some(reference) = &msc.spec.firewall_template_ref else {
        return Ok(None);
    };
    let ns = msc.namespace().unwrap_or_default();
    let templates = ctx.api::<MetalStackFirewallTemplate>(&ns);
    if let Some(template) = templates.get_opt(&reference.name).await? {
        let resource = template.spec.template;
        return Ok(Some(plan_firewall(
            msc,
            cluster_name,
            resource.spec,
            Some((&reference.name, resource.metadata.as_ref())),
        )));
    }
    set_condition(
        &mut status.conditions,
        "FirewallReady",
        false,
        "FirewallTemplateNotFound",
        template_not_found(&templates, &ns, &reference.name).await?,
        msc.metadata.generation,
    );
    Ok(None)
}

/// What a person reads when spec.firewallTemplateRef names no template: the name, and the
/// templates the namespace does have. The controller's condition and the webhook's warning.
pub async fn template_not_found(
    templates: &kube::Api<MetalStackFirewallTemplate>,
    namespace: &str,
    name: &str,
) -> kube::Result<String> {
    let existing = templates.list_metadata(&ListParams::default()).await?;
    Ok(format!(
        "spec.firewallTemplateRef: MetalStackFirewallTemplate {namespace}/{name} does not exist (yet); the firewall is created once it does; templates in the namespace: {}",
        crate::choices(existing.items.iter().map(|t| t.name_any()))
    ))
}

/// The cluster's private network as far as it exists: recorded in status, given in spec, or
/// found in metal-api by the cluster's owner labels (so a lost status write does not hide it).
pub async fn private_network(msc: &MetalStackCluster, ctx: &Context) -> Result<Option<String>> {
    if let Some(id) = msc
        .status
        .as_ref()
        .and_then(|s| s.network_id.clone())
        .or_else(|| msc.spec.private_network_id.clone())
    {
        return Ok(Some(id));
    }
    let find = NetworkFindRequest {
        labels: Some(marks(msc)),
        ..Default::default()
    };
    Ok(ctx
        .metal
        .network_find(&find)
        .await?
        .into_iter()
        .next()
        .map(|n| n.id))
}

/// The private network: the one in spec.privateNetworkID, the one capms allocated before (found
/// by its owner labels), or a new one.
async fn ensure_network(
    msc: &MetalStackCluster,
    ctx: &Context,
    status: &mut MetalStackClusterStatus,
) -> Result<String> {
    if let Some(id) = &msc.spec.private_network_id {
        match ctx.metal.network(id).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {
                let valid = network_choices(ctx, |n| {
                    n.parentnetworkid.is_some()
                        && n.projectid == msc.spec.project_id
                        && n.partitionid == msc.spec.partition
                })
                .await;
                return Err(Error::Invalid(format!(
                    "spec.privateNetworkID: network {id:?} does not exist in metal-api; valid private networks of the project: {valid}"
                )));
            }
            Err(e) => return Err(e.into()),
        }
        status.network_id = Some(id.clone());
        return Ok(id.clone());
    }
    // Recorded by an earlier reconcile: no need to ask metal-api again. The lookup by owner
    // labels below is for when that record was lost (crash, refused status write).
    if let Some(id) = status.allocated_network_id.clone() {
        status.network_id = Some(id.clone());
        return Ok(id);
    }
    let marks = marks(msc);
    let find = NetworkFindRequest {
        labels: Some(marks.clone()),
        partitionid: Some(msc.spec.partition.clone()),
        projectid: Some(msc.spec.project_id.clone()),
        ..Default::default()
    };
    let existing = ctx.metal.network_find(&find).await?;
    if existing.len() > 1 {
        tracing::warn!(
            count = existing.len(),
            "several networks carry this cluster's owner labels; using the first"
        );
    }
    let network = match existing.into_iter().next() {
        Some(n) => n,
        None => {
            let ns = msc.namespace().unwrap_or_default();
            let name = msc.name_any();
            let mut labels = marks;
            labels.insert(CLUSTER_ID_KEY.into(), cluster_id(&ns, &name));
            let req = NetworkAllocateRequest {
                projectid: msc.spec.project_id.clone(),
                partitionid: msc.spec.partition.clone(),
                name: name.clone(),
                description: format!("private network of cluster {ns}/{name}, allocated by capms"),
                labels,
                ..Default::default()
            };
            let n = ctx.metal.network_allocate(&req).await?;
            ctx.event(
                msc,
                false,
                "NetworkAllocated",
                "AllocateNetwork",
                format!(
                    "allocated private network {} ({})",
                    n.id,
                    n.prefixes.join(", ")
                ),
            )
            .await;
            n
        }
    };
    status.allocated_network_id = Some(network.id.clone());
    status.network_id = Some(network.id.clone());
    Ok(network.id)
}

/// The control-plane endpoint: an IP capms allocates when the host is empty, a static IP it
/// reserves when the host lies in the public network, or the host as given.
async fn ensure_control_plane_ip(
    msc: &MetalStackCluster,
    ctx: &Context,
    status: &mut MetalStackClusterStatus,
) -> Result<String> {
    let endpoint = msc.spec.control_plane_endpoint.clone().unwrap_or_default();
    let port = endpoint
        .port
        .unwrap_or(crate::api::common::DEFAULT_API_PORT);
    let marks = marks(msc);
    let tags = owner_tags(&marks);
    let ns = msc.namespace().unwrap_or_default();
    let name = msc.name_any();
    let host = match endpoint.host.as_deref().filter(|h| !h.is_empty()) {
        None => {
            let find = IpFindRequest {
                networkid: Some(msc.spec.public_network_id.clone()),
                tags: tags.clone(),
                ..Default::default()
            };
            let ip = match ctx.metal.ip_find(&find).await?.into_iter().next() {
                Some(ip) => ip,
                None => {
                    let mut all_tags = tags.clone();
                    all_tags.push(PURPOSE_CONTROL_PLANE.into());
                    all_tags.push(format!("{CLUSTER_ID_KEY}={}", cluster_id(&ns, &name)));
                    let req = IpAllocateRequest {
                        networkid: msc.spec.public_network_id.clone(),
                        projectid: msc.spec.project_id.clone(),
                        type_: IP_TYPE_EPHEMERAL.into(),
                        name: format!("{name}-control-plane"),
                        description: format!(
                            "control-plane IP of cluster {ns}/{name}, allocated by capms"
                        ),
                        tags: all_tags,
                        ..Default::default()
                    };
                    let ip = ctx.metal.ip_allocate(&req).await?;
                    ctx.event(
                        msc,
                        false,
                        "ControlPlaneIPAllocated",
                        "AllocateIP",
                        format!("allocated control-plane IP {}", ip.ipaddress),
                    )
                    .await;
                    ip
                }
            };
            status.allocated_control_plane_ip = Some(ip.ipaddress.clone());
            ip.ipaddress
        }
        // Reserved by an earlier reconcile.
        Some(host) if status.allocated_control_plane_ip.as_deref() == Some(host) => host.to_owned(),
        Some(host) => {
            if let Some(ip) = reserve_given_host(msc, ctx, host, &tags).await? {
                status.allocated_control_plane_ip = Some(ip);
            }
            host.to_owned()
        }
    };
    if endpoint.host.as_deref() != Some(host.as_str()) || endpoint.port != Some(port) {
        let patch = serde_json::json!({"spec": {"controlPlaneEndpoint": ApiEndpoint { host: Some(host.clone()), port: Some(port) }}});
        ctx.api::<MetalStackCluster>(&ns)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(format!("{host}:{port}"))
}

/// Reserves a host the user gave as a static IP when it lies in the public network. Returns the
/// address when capms holds it (now or from before), None when it is someone else's or no IP of
/// the public network at all.
async fn reserve_given_host(
    msc: &MetalStackCluster,
    ctx: &Context,
    host: &str,
    tags: &[String],
) -> Result<Option<String>> {
    let Ok(address) = host.parse::<IpAddr>() else {
        return Ok(None);
    };
    let network = match ctx.metal.network(&msc.spec.public_network_id).await {
        Ok(n) => n,
        Err(e) if e.is_not_found() => {
            let valid = network_choices(ctx, |n| {
                n.parentnetworkid.is_none() && !n.privatesuper && !n.underlay
            })
            .await;
            return Err(Error::Invalid(format!(
                "spec.publicNetworkID: network {:?} does not exist in metal-api; valid external networks: {valid}",
                msc.spec.public_network_id
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let inside = network
        .prefixes
        .iter()
        .filter_map(|p| p.parse::<Cidr>().ok())
        .any(|p| p.contains_addr(address));
    if !inside {
        return Ok(None);
    }
    match ctx.metal.ip(host).await {
        Ok(ip) if has_owner_tags(&ip.tags, &owner_marks_from_tags(tags)) => Ok(Some(ip.ipaddress)),
        Ok(_) => Ok(None),
        Err(e) if e.is_not_found() => {
            let ns = msc.namespace().unwrap_or_default();
            let name = msc.name_any();
            let mut all_tags = tags.to_vec();
            all_tags.push(PURPOSE_CONTROL_PLANE.into());
            let req = IpAllocateRequest {
                networkid: msc.spec.public_network_id.clone(),
                projectid: msc.spec.project_id.clone(),
                type_: IP_TYPE_STATIC.into(),
                name: format!("{name}-control-plane"),
                description: format!("control-plane IP of cluster {ns}/{name}, reserved by capms"),
                tags: all_tags,
                ..Default::default()
            };
            let ip = ctx.metal.ip_allocate_specific(host, &req).await?;
            ctx.event(
                msc,
                false,
                "ControlPlaneIPReserved",
                "AllocateIP",
                format!("reserved {host} as static control-plane IP"),
            )
            .await;
            Ok(Some(ip.ipaddress))
        }
        Err(e) => Err(e.into()),
    }
}

fn owner_marks_from_tags(tags: &[String]) -> std::collections::BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| t.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The ids of metal-api's networks that `fits`, for an error message (only asked on that path).
async fn network_choices(
    ctx: &Context,
    fits: impl Fn(&crate::metal::types::Network) -> bool,
) -> String {
    match ctx.metal.networks().await {
        Ok(all) => crate::choices(all.into_iter().filter(|n| fits(n)).map(|n| n.id)),
        Err(_) => "(metal-api could not list them)".into(),
    }
}

/// Deletion: wait for the cluster's machines, delete the firewall and wait for it, then free the
/// control-plane IP and the network capms allocated (never ones it did not allocate).
async fn cleanup(
    msc: &MetalStackCluster,
    ctx: &Context,
    mut status: MetalStackClusterStatus,
) -> Result<Action> {
    if !msc.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let ns = msc.namespace().unwrap_or_default();
    let api = ctx.api::<MetalStackCluster>(&ns);
    let generation = msc.metadata.generation;
    status.ready = false;
    status.initialization = None;
    let wait = |status: &mut MetalStackClusterStatus, reason: &str, message: String| {
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            reason,
            message,
            generation,
        );
    };

    if let Some(cluster_name) = msc.labels().get(CLUSTER_NAME_LABEL) {
        let machines = ctx
            .api::<MetalStackMachine>(&ns)
            .list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={cluster_name}")))
            .await?;
        if !machines.items.is_empty() {
            wait(
                &mut status,
                "WaitingForMachines",
                format!(
                    "deleting: waiting for {} MetalStackMachine(s) of the cluster to go",
                    machines.items.len()
                ),
            );
            apply_status(&api, msc, &status).await?;
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
    }
    let fw_api = ctx.api::<MetalStackFirewall>(&ns);
    let fw_name = firewall_name(&msc.name_any());
    if let Some(fw) = fw_api.get_opt(&fw_name).await? {
        let ours = fw
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == msc.metadata.uid.as_ref());
        if ours {
            if fw.metadata.deletion_timestamp.is_none() {
                fw_api.delete(&fw_name, &Default::default()).await?;
                ctx.event(
                    msc,
                    false,
                    "FirewallDeleting",
                    "DeleteFirewall",
                    format!("deleting MetalStackFirewall {fw_name}"),
                )
                .await;
            }
            wait(
                &mut status,
                "WaitingForFirewall",
                format!("deleting: waiting for MetalStackFirewall {fw_name} to go"),
            );
            apply_status(&api, msc, &status).await?;
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
    }

    let marks = marks(msc);
    let tags = owner_tags(&marks);
    let mut ips: Vec<String> = ctx
        .metal
        .ip_find(&IpFindRequest {
            networkid: Some(msc.spec.public_network_id.clone()),
            tags: tags.clone(),
            ..Default::default()
        })
        .await?
        .into_iter()
        .map(|ip| ip.ipaddress)
        .collect();
    ips.extend(status.allocated_control_plane_ip.clone());
    ips.sort();
    ips.dedup();
    for address in ips {
        match ctx.metal.ip(&address).await {
            // Only an IP that still carries our owner tags is ours to free.
            Ok(ip) if has_owner_tags(&ip.tags, &marks) => {
                ctx.metal.ip_free(&address).await?;
                ctx.event(
                    msc,
                    false,
                    "ControlPlaneIPFreed",
                    "FreeIP",
                    format!("freed control-plane IP {address}"),
                )
                .await;
            }
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    status.allocated_control_plane_ip = None;

    let mut networks: Vec<String> = ctx
        .metal
        .network_find(&NetworkFindRequest {
            labels: Some(marks.clone()),
            ..Default::default()
        })
        .await?
        .into_iter()
        .map(|n| n.id)
        .collect();
    networks.extend(status.allocated_network_id.clone());
    networks.sort();
    networks.dedup();
    for id in networks {
        match ctx.metal.network(&id).await {
            Ok(n) if marks.iter().all(|(k, v)| n.labels.get(k) == Some(v)) => {
                match ctx.metal.network_free(&id).await {
                    Ok(_) => {
                        ctx.event(
                            msc,
                            false,
                            "NetworkFreed",
                            "FreeNetwork",
                            format!("freed private network {id}"),
                        )
                        .await
                    }
                    // metal-api releases machine IPs asynchronously after a free; try again shortly.
                    Err(e) if e.status() == Some(422) => {
                        wait(
                            &mut status,
                            "WaitingForNetworkRelease",
                            format!("deleting: network {id} still holds IPs: {e}"),
                        );
                        apply_status(&api, msc, &status).await?;
                        return Ok(Action::requeue(Duration::from_secs(2)));
                    }
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    remove_finalizer(&api, msc, FINALIZER).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MetalStackClusterSpec;

    fn cluster() -> MetalStackCluster {
        let mut msc = MetalStackCluster::new("c1", MetalStackClusterSpec::default());
        msc.metadata.namespace = Some("team-a".into());
        msc.metadata.uid = Some("0b9c5b4e-0000-4000-8000-000000000001".into());
        msc
    }

    fn spec() -> MetalStackFirewallSpec {
        MetalStackFirewallSpec {
            image: "firewall-ubuntu-3.0".into(),
            machine_type: "v1-small-x86".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_template_maps_to_the_clusters_of_its_namespace_that_name_it() {
        let using = |ns: &str, name: &str, template: Option<&str>| {
            let mut c = MetalStackCluster::new(name, MetalStackClusterSpec::default());
            c.metadata.namespace = Some(ns.into());
            c.spec.firewall_template_ref =
                template.map(|t| crate::api::LocalObjectReference { name: t.into() });
            Arc::new(c)
        };
        let clusters = [
            using("team-a", "one", Some("edge")),
            using("team-a", "two", Some("core")),
            using("team-a", "three", None),
            using("team-b", "four", Some("edge")),
            using("team-a", "five", Some("edge")),
        ];
        let mut template = MetalStackFirewallTemplate::new("edge", Default::default());
        template.metadata.namespace = Some("team-a".into());
        let names: Vec<_> = clusters_using_template(&template, &clusters)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["one", "five"]);
    }

    #[test]
    fn an_inline_firewall_carries_only_the_cluster_label_and_owner() {
        let fw = plan_firewall(&cluster(), "prod", spec(), None);
        assert_eq!(fw.metadata.name.as_deref(), Some("c1-firewall"));
        assert_eq!(fw.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(
            fw.metadata.labels,
            Some([(CLUSTER_NAME_LABEL.to_owned(), "prod".to_owned())].into())
        );
        assert_eq!(fw.metadata.annotations, None);
        let owner = &fw.metadata.owner_references.expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("MetalStackCluster", Some(true))
        );
        assert_eq!(fw.spec, spec());
    }

    #[test]
    fn a_templated_firewall_takes_the_template_metadata_but_keeps_its_cluster_label() {
        let meta = TemplateMeta {
            labels: [
                ("team".to_owned(), "net".to_owned()),
                (CLUSTER_NAME_LABEL.to_owned(), "someone-else".to_owned()),
            ]
            .into(),
            annotations: [("note".to_owned(), "shared rules".to_owned())].into(),
        };
        let fw = plan_firewall(&cluster(), "prod", spec(), Some(("edge", Some(&meta))));
        let labels = fw.metadata.labels.expect("labels");
        assert_eq!(labels.get("team").map(String::as_str), Some("net"));
        assert_eq!(
            labels.get(CLUSTER_NAME_LABEL).map(String::as_str),
            Some("prod"),
            "a template cannot move the firewall to another cluster"
        );
        let annotations = fw.metadata.annotations.expect("annotations");
        assert_eq!(
            annotations.get("note").map(String::as_str),
            Some("shared rules")
        );
        assert_eq!(
            annotations.get(CLONED_FROM_NAME).map(String::as_str),
            Some("edge")
        );
        assert_eq!(
            annotations.get(CLONED_FROM_GROUPKIND).map(String::as_str),
            Some("MetalStackFirewallTemplate.infrastructure.cluster.x-k8s.io")
        );
    }
}
