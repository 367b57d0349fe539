//! Firewall templates and the clusters that use them. Unlike Cluster API's templates, a
//! MetalStackFirewallTemplate may change: a change rolls the firewall of every cluster using it.
//! So a template is checked against each of those clusters, and refused naming the cluster it
//! could not serve; a cluster newly naming a template is checked against it the same way.

use crate::api::v1alpha1::MetalStackFirewallDeployment;
use crate::api::{MetalStackCluster, MetalStackClusterSpec, MetalStackFirewallTemplate};
use crate::webhooks::admit::{self, Admit, Allowed, Denial, Review, WebhookState};
use crate::webhooks::rules::{self, Report};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use metal_api::Catalog;

/// The clusters using `template` (but those being deleted), asked of the apiserver: the
/// controllers' caches follow `--watch-filter`, and a template change is rare. None when the
/// apiserver cannot answer; the template is then checked on its own.
async fn users(
    client: &kube::Client,
    template: &MetalStackFirewallTemplate,
) -> Option<Vec<MetalStackCluster>> {
    let ns = template.namespace()?;
    let listed = async {
        let params = ListParams::default();
        let clusters = Api::<MetalStackCluster>::namespaced(client.clone(), &ns);
        let deployments = Api::<MetalStackFirewallDeployment>::namespaced(client.clone(), &ns);
        Ok::<_, kube::Error>((
            clusters.list(&params).await?.items,
            deployments.list(&params).await?.items,
        ))
    };
    let (clusters, deployments) = match listed.await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(namespace = %ns, error = %e, "listing the clusters that use a firewall template failed; checking the template on its own");
            return None;
        }
    };
    let users = crate::api::clusters_using_template(template, &clusters, &deployments);
    let live = users
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none());
    Some(live.cloned().collect())
}

/// The template's firewall networks against one cluster using it, each error naming the cluster.
fn check_user(
    report: &mut Report,
    template: &MetalStackFirewallTemplate,
    cluster: &MetalStackCluster,
    catalog: &Catalog,
) {
    let whose = format!(
        "; MetalStackCluster {}/{} uses this template, and its firewall could not be allocated",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any()
    );
    let own = cluster.spec.private_network_id.as_deref().or_else(|| {
        let status = cluster.status.as_ref()?;
        status.network_id.as_deref()
    });
    rules::check_firewall_networks(
        report,
        "spec.template.spec.networks",
        &template.spec.template.spec.networks,
        (&cluster.spec, own),
        &whose,
        catalog,
    );
}

impl Admit for MetalStackFirewallTemplate {
    async fn default(&mut self, _review: &Review<'_>) {
        rules::default_firewall(&mut self.spec.template.spec);
    }

    /// A firewall spec that names no machine, and one that can serve every cluster using the
    /// template. Unlike Cluster API's templates, it may change.
    async fn validate(&self, _old: Option<&Self>, review: &Review<'_>) -> Result<Allowed, Denial> {
        let users = users(&review.state.client, self).await.unwrap_or_default();
        // Each cluster using it is judged by its own metal-api.
        let named = match users.is_empty() {
            true => admit::namespace_credentials(review).await,
            false => users
                .iter()
                .map(|c| admit::credentials_of(Some(c)).map(str::to_owned))
                .collect(),
        };
        admit::with_catalog_of_all(review, named, |catalog| {
            let mut report = Report::default();
            let spec = &self.spec.template.spec;
            rules::validate_firewall_template(&mut report, "spec.template.spec", spec, catalog);
            if let Some(catalog) = catalog.filter(|_| report.errors.is_empty()) {
                for cluster in &users {
                    check_user(&mut report, self, cluster, catalog);
                }
            }
            report
        })
        .await
    }
}

/// The template a cluster newly names, or a warning that it does not exist (yet): manifests may
/// well create the template after the cluster, which then waits for it. Nothing when the
/// apiserver cannot answer.
pub(super) async fn named(
    state: &WebhookState,
    namespace: &str,
    name: &str,
) -> Option<Result<MetalStackFirewallTemplate, String>> {
    let client = &state.client;
    let found = crate::cache::read_through(&state.caches, client, namespace, name).await;
    if let Some(template) = found.ok()? {
        return Some(Ok(template));
    }
    let templates = Api::<MetalStackFirewallTemplate>::namespaced(client.clone(), namespace);
    let existing = crate::cache::names(&templates).await.ok()?;
    Some(Err(crate::api::missing_reference(
        "spec.firewallTemplateRef",
        "MetalStackFirewallTemplate",
        namespace,
        name,
        &existing,
    )))
}

/// The networks of the template a cluster newly names, against the cluster; the errors filed
/// under spec.firewallTemplateRef, saying which of the template's fields they concern.
pub(super) fn check_named(
    report: &mut Report,
    template: &MetalStackFirewallTemplate,
    cluster: &MetalStackClusterSpec,
    catalog: &Catalog,
) {
    let mut found = Report::default();
    let own = cluster.private_network_id.as_deref();
    rules::check_firewall_networks(
        &mut found,
        "spec.template.spec.networks",
        &template.spec.template.spec.networks,
        (cluster, own),
        "",
        catalog,
    );
    for error in found.errors {
        report.error(
            "spec.firewallTemplateRef",
            format!(
                "MetalStackFirewallTemplate {}: {error}",
                template.name_any()
            ),
        );
    }
}
