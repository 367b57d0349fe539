//! Partitions, sizes, images and the project, read through v2 into metal-api's model.

use super::{Backend, Failure, Result};
use crate::types::{HealthResponse, Image, Partition, Project, ProjectMeta, Size, SizeConstraint};
use metalstack_api::types::Meta;
use metalstack_api::types::catalog as v2;

fn partition(p: v2::Partition) -> Partition {
    Partition {
        name: p.id.clone(),
        labels: Meta::labels(p.meta.as_ref()),
        id: p.id,
        description: p.description,
        ..Default::default()
    }
}

/// `cores`, `memory`, … as v1 names a constraint's type.
fn constraint_type(t: v2::SizeConstraintType) -> &'static str {
    match t {
        v2::SizeConstraintType::Cores => "cores",
        v2::SizeConstraintType::Memory => "memory",
        v2::SizeConstraintType::Storage => "storage",
        v2::SizeConstraintType::Gpu => "gpu",
        v2::SizeConstraintType::Unspecified => "",
    }
}

fn size(s: v2::Size) -> Size {
    let constraints = s.constraints.into_iter().map(|c| SizeConstraint {
        type_: constraint_type(c.type_).into(),
        min: c.min.parse().unwrap_or_default(),
        max: c.max.parse().unwrap_or_default(),
        identifier: c.identifier.unwrap_or_default(),
    });
    Size {
        name: s.name.unwrap_or_else(|| s.id.clone()),
        description: s.description.unwrap_or_default(),
        labels: Meta::labels(s.meta.as_ref()),
        constraints: constraints.collect(),
        id: s.id,
        ..Default::default()
    }
}

/// An image in metal-api's model.
pub(super) fn image(i: v2::Image) -> Image {
    let features = i.features.iter().filter_map(|f| match f {
        v2::ImageFeature::Machine => Some(crate::types::FEATURE_MACHINE.to_owned()),
        v2::ImageFeature::Firewall => Some(crate::types::FEATURE_FIREWALL.to_owned()),
        v2::ImageFeature::Unspecified => None,
    });
    let classification = match i.classification {
        v2::ImageClassification::Preview => "preview",
        v2::ImageClassification::Supported => "supported",
        v2::ImageClassification::Deprecated => "deprecated",
        v2::ImageClassification::Unspecified => "",
    };
    let mut image = Image {
        name: i.name.unwrap_or_default(),
        description: i.description.unwrap_or_default(),
        url: i.url,
        features: features.collect(),
        classification: classification.into(),
        id: i.id,
        ..Default::default()
    };
    if let Some(expires) = i.expires_at {
        image.expiration_date = expires;
    }
    image
}

impl Backend {
    pub(crate) async fn health(&self) -> Result<HealthResponse> {
        self.api.health().await?;
        Ok(HealthResponse {
            status: "healthy".into(),
            message: String::new(),
        })
    }

    pub(crate) async fn partitions(&self) -> Result<Vec<Partition>> {
        let partitions = self.api.partitions().await?;
        Ok(partitions.into_iter().map(partition).collect())
    }

    pub(crate) async fn sizes(&self) -> Result<Vec<Size>> {
        Ok(self.api.sizes().await?.into_iter().map(size).collect())
    }

    pub(crate) async fn images(&self) -> Result<Vec<Image>> {
        Ok(self.api.images().await?.into_iter().map(image).collect())
    }

    pub(crate) async fn image_latest(&self, os: &str) -> Result<Image> {
        Ok(image(self.api.latest_image(os).await?))
    }

    pub(crate) async fn try_size_image(&self, size: &str, image: &str) -> Result<()> {
        Ok(self.api.try_size_image(size, image).await?)
    }

    /// The token's project: the only one a project token sees.
    pub(crate) async fn projects(&self) -> Result<Vec<Project>> {
        Ok(vec![self.project(&self.project).await?])
    }

    pub(crate) async fn project(&self, id: &str) -> Result<Project> {
        let p = self.api.project(id).await?;
        Ok(Project {
            meta: ProjectMeta {
                id: p.uuid,
                ..Default::default()
            },
            name: p.name,
            description: p.description,
            tenant_id: p.tenant,
        })
    }

    /// A partition, from the list: v2's Get answers no more than the list does.
    pub(crate) async fn partition(&self, id: &str) -> Result<Partition> {
        let all = self.partitions().await?;
        Self::one(all.into_iter().find(|p| p.id == id), "partition", id)
    }

    /// A size, from the list.
    pub(crate) async fn size(&self, id: &str) -> Result<Size> {
        let all = self.sizes().await?;
        Self::one(all.into_iter().find(|s| s.id == id), "size", id)
    }

    /// An image, from the list.
    pub(crate) async fn image(&self, id: &str) -> Result<Image> {
        let all = self.images().await?;
        Self::one(all.into_iter().find(|i| i.id == id), "image", id)
    }

    /// One of a list, by id; `not_found` when it is not there.
    fn one<T>(found: Option<T>, what: &str, id: &str) -> Result<T> {
        found.ok_or_else(|| {
            Failure::Call(metalstack_api::Error::Connect {
                procedure: format!("{what} {id}"),
                code: metalstack_api::Code::NotFound,
                message: format!("{what} {id:?} not found"),
            })
        })
    }
}
