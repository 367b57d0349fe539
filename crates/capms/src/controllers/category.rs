//! What went wrong in a reconcile, typed: a metric label, a condition reason and whether waiting
//! can help.

/// What went wrong in a reconcile, as a closed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// Someone else wrote the object first; retried at once with the newer version.
    KubeConflict,
    KubeApi,
    /// Something a person has to fix in a spec.
    InvalidSpec,
    Metal(metal_api::error::Category),
}

impl Category {
    /// snake_case, for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Category::KubeConflict => "kube_conflict",
            Category::KubeApi => "kube_api",
            Category::InvalidSpec => "invalid_spec",
            Category::Metal(c) => c.label(),
        }
    }

    /// PascalCase, for condition reasons.
    pub fn reason(self) -> &'static str {
        match self {
            Category::KubeConflict => "KubernetesConflict",
            Category::KubeApi => "KubernetesAPIError",
            Category::InvalidSpec => "InvalidSpec",
            Category::Metal(c) => c.reason(),
        }
    }

    /// Can a later retry succeed without anyone changing anything?
    pub fn is_transient(self) -> bool {
        match self {
            Category::KubeConflict | Category::KubeApi => true,
            Category::InvalidSpec => false,
            Category::Metal(c) => c.is_transient(),
        }
    }
}
