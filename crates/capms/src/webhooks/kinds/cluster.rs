//! MetalStackCluster and MetalStackClusterTemplate: defaults (the Go provider's own for
//! `v1alpha1` objects), the spec against metal-api's catalog, and a newly named firewall
//! template against the cluster.

use super::firewall_template;
use crate::api::{MetalStackCluster, MetalStackClusterTemplate};
use crate::conversion::Schema;
use crate::webhooks::admit::{self, Admit, Allowed, Denial, Review};
use crate::webhooks::rules::{self, Report};

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
        let mut allowed = admit::with_catalog(review.state, |catalog| {
            let mut report = Report::default();
            rules::validate_cluster(&mut report, "spec", &self.spec, old_spec, catalog);
            if let (Some(Ok(template)), Some(catalog)) = (&template, catalog) {
                firewall_template::check_named(&mut report, template, &self.spec, catalog);
            }
            report
        })
        .await?;
        if let Some(Err(missing)) = template {
            allowed.warnings.push(missing);
        }
        Ok(allowed)
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
