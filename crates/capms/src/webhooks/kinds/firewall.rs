//! MetalStackFirewall: defaults, and the spec against metal-api's catalog.

use crate::api::MetalStackFirewall;
use crate::ownership::firewall_identity;
use crate::webhooks::admit::{self, Admit, Allowed, Denial, Review};
use crate::webhooks::rules::{self, Report};

impl Admit for MetalStackFirewall {
    async fn default(&mut self, _review: &Review<'_>) {
        rules::default_firewall(&mut self.spec);
    }

    async fn validate(&self, old: Option<&Self>, review: &Review<'_>) -> Result<Allowed, Denial> {
        // A firewall made for a Go provider firewall deployment is known by the deployment's
        // mark.
        let ours = firewall_identity(self);
        let old_spec = old.map(|o| &o.spec);
        let cluster = admit::cluster_of(review).await;
        let (ns, secret) = (review.namespace(), admit::credentials_of(cluster.as_ref()));
        admit::with_catalog_of(review.state, &ns, secret, |catalog| {
            let mut report = Report::default();
            let spec = &self.spec;
            rules::validate_firewall(
                &mut report,
                "spec",
                spec,
                old_spec,
                None,
                catalog,
                Some(&ours),
            );
            report
        })
        .await
    }
}
