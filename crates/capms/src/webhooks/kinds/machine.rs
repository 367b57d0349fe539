//! MetalStackMachine and MetalStackMachineTemplate: a new machine's partition from its
//! cluster, and the spec against metal-api's catalog.

use crate::api::{MetalStackMachine, MetalStackMachineTemplate};
use crate::cache::catalogs::agreed;
use crate::conversion::Schema;
use crate::ownership::{OwnerKind, identity_of};
use crate::webhooks::admit::{self, Admit, Allowed, Denial, Review};
use crate::webhooks::rules::{self, Report};

impl Admit for MetalStackMachine {
    /// The Go provider's machines take their cluster's partition, as capms's do when they name
    /// none; written down, it would only burden the v1alpha1 object with an annotation.
    fn defaulted_in(schema: Schema) -> bool {
        schema == Schema::Capms
    }

    async fn default(&mut self, review: &Review<'_>) {
        // Only a new machine's partition is written down: a replica Cluster API cloned from a
        // template was never sent here, and writing its partition on a later update would
        // change a field that is fixed once the machine is allocated.
        let partition = match &self.spec.partition {
            None if review.creating() => admit::cluster_of(review)
                .await
                .map(|msc| msc.spec.partition),
            _ => None,
        };
        rules::default_machine(&mut self.spec, partition.as_deref());
    }

    async fn validate(&self, old: Option<&Self>, review: &Review<'_>) -> Result<Allowed, Denial> {
        let ours = identity_of(OwnerKind::Machine, self);
        let old_spec = old.map(|o| &o.spec);
        let cluster = admit::cluster_of(review).await;
        let (ns, secret) = (review.namespace(), admit::credentials_of(cluster.as_ref()));
        let allowed = admit::with_catalog_of(review.state, &ns, secret, |catalog| {
            let mut report = Report::default();
            rules::validate_machine(
                &mut report,
                "spec",
                &self.spec,
                old_spec,
                catalog,
                Some(&ours),
            );
            report
        })
        .await?;
        // A machine's size and image are fixed once made: asked when they are new.
        let same = old_spec.is_some_and(|o| {
            (&o.machine_type, &o.image) == (&self.spec.machine_type, &self.spec.image)
        });
        if same {
            return Ok(allowed);
        }
        admit::with_size_image_tried(review.state, (&ns, secret), "spec", &self.spec, allowed).await
    }
}

impl Admit for MetalStackMachineTemplate {
    /// Nothing to default: the machines made from a template take their cluster's partition.
    fn defaulted_in(_schema: Schema) -> bool {
        false
    }

    async fn validate(&self, old: Option<&Self>, review: &Review<'_>) -> Result<Allowed, Denial> {
        let allowed = admit::validate_template(self, old, review, |report, t, catalog| {
            let spec = &t.spec.template.spec;
            rules::validate_machine(report, "spec.template.spec", spec, None, catalog, None);
        })
        .await?;
        // Templates are immutable: an update changes no size or image worth asking about.
        if old.is_some() {
            return Ok(allowed);
        }
        let Ok(secret) = agreed(admit::namespace_credentials(review).await) else {
            return Ok(allowed);
        };
        let (ns, spec) = (review.namespace(), &self.spec.template.spec);
        let at = (ns.as_str(), secret.as_deref());
        admit::with_size_image_tried(review.state, at, "spec.template.spec", spec, allowed).await
    }
}
