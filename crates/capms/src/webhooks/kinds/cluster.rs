//! MetalStackCluster and MetalStackClusterTemplate: defaults (the Go provider's own for
//! `v1alpha1` objects), the spec against metal-api's catalog, a newly named firewall template
//! against the cluster, and a newly named credentials Secret's shape.

use super::firewall_template;
use crate::api::{MetalStackCluster, MetalStackClusterTemplate};
use crate::cache::catalog::Unavailable;
use crate::cache::credentials_secret::config_of;
use crate::conversion::Schema;
use crate::webhooks::admit::{self, Admit, Allowed, Denial, Review};
use crate::webhooks::rules::{self, Report};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use metal_api::error::Category;

impl Admit for MetalStackCluster {
    async fn default(&mut self, review: &Review<'_>) {
        match review.schema {
            Schema::GoProvider => rules::default_go_provider_cluster(&mut self.spec),
            Schema::Capms => rules::default_cluster(&mut self.spec),
        }
    }

    /// The spec against the catalog, and a warning when its firewall template does not exist
    /// (yet).
    async fn validate(&self, old: Option<&Self>, review: &Review<'_>) -> Result<Allowed, Denial> {
        let old_spec = old.map(|o| &o.spec);
        // Only a newly named template is looked up.
        let reference = self
            .spec
            .firewall_template_ref
            .as_ref()
            .filter(|r| old_spec.is_none_or(|o| o.firewall_template_ref.as_ref() != Some(*r)));
        let template = match reference {
            Some(reference) => {
                firewall_template::named(review.state, &review.namespace(), &reference.name).await
            }
            None => None,
        };
        let credentials = match self.spec.credentials_ref.as_ref() {
            Some(r) if old_spec.is_none_or(|o| o.credentials_ref.as_ref() != Some(r)) => {
                credentials_secret(review, &r.name).await
            }
            _ => Ok(None),
        };
        let (ns, secret) = (review.namespace(), admit::credentials_of(Some(self)));
        let mut allowed = admit::with_catalog_of(review.state, &ns, secret, |catalog| {
            let mut report = Report::default();
            rules::validate_cluster(&mut report, "spec", &self.spec, old_spec, catalog);
            if let Err(wrong) = &credentials {
                report.error("spec.credentialsRef.name", wrong.clone());
            }
            if let (Some(Ok(template)), Some(catalog)) = (&template, catalog) {
                firewall_template::check_named(&mut report, template, &self.spec, catalog);
            }
            report
        })
        .await?;
        if let Some(Err(missing)) = template {
            allowed.warnings.push(missing);
        }
        allowed.warnings.extend(credentials.ok().flatten());
        Ok(allowed)
    }
}

/// The credentials Secret `name` a cluster newly names, as capms will read it: Err (the
/// refusal) when it has the wrong shape or metal-api refuses what it holds, a warning when it is
/// not there (yet) or cannot be read now. Its contents never reach the answer.
async fn credentials_secret(review: &Review<'_>, name: &str) -> Result<Option<String>, String> {
    let ns = review.namespace();
    let secrets = Api::<Secret>::namespaced(review.state.client.clone(), &ns);
    let origin = format!("Secret {ns}/{name}");
    match secrets.get_opt(name).await {
        Ok(Some(secret)) => {
            config_of(&secret.data.unwrap_or_default(), &origin)
                .map_err(|detail| format!("the credentials {origin}: {detail}"))?;
            refused_by_metal_api(review, &ns, name).await.map(|()| None)
        }
        Ok(None) => Ok(Some(format!(
            "the credentials {origin} does not exist (yet): the cluster waits for it"
        ))),
        Err(e) => Ok(Some(format!(
            "the credentials {origin} could not be read now ({e}); it is checked when capms acts"
        ))),
    }
}

/// Err (the refusal) when the metal-api the credentials Secret `name` reaches refuses what it
/// holds (401/403): known now, and nothing of the cluster could be done with it. An unanswering
/// metal-api is no refusal: it may answer later.
async fn refused_by_metal_api(review: &Review<'_>, ns: &str, name: &str) -> Result<(), String> {
    let Ok(catalog) = review.state.catalogs.of(ns, Some(name)).await else {
        return Ok(());
    };
    match catalog.get().await {
        Err(Unavailable::Failed(e)) if e.category() == Category::Unauthorized => {
            Err(format!("metal-api refused the credentials: {e}"))
        }
        _ => Ok(()),
    }
}

impl Admit for MetalStackClusterTemplate {
    async fn default(&mut self, _review: &Review<'_>) {
        rules::default_cluster(&mut self.spec.template.spec);
    }

    async fn validate(&self, old: Option<&Self>, review: &Review<'_>) -> Result<Allowed, Denial> {
        admit::validate_template(self, old, review, |report, t, catalog| {
            let spec = &t.spec.template.spec;
            rules::validate_cluster(report, "spec.template.spec", spec, None, catalog);
        })
        .await
    }
}
