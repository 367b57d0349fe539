//! How a reconcile fails: the operation that failed, and a typed category that is a metric
//! label, a condition reason and whether waiting can help.

/// A failed reconcile. Kubernetes errors name the operation and object they happened to;
/// metal-api's name their endpoint.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{operation}: Kubernetes API: {source}")]
    Kube {
        /// What capms was doing, naming the object: `adding the finalizer to MetalStackMachine
        /// ns/name`.
        operation: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Metal(#[from] metal_api::Error),
    /// The cluster's credentials Secret is missing or unusable, or could not be read.
    #[error(transparent)]
    Credentials(#[from] crate::cache::credentials::CredentialsError),
    /// Something a person has to fix in a spec or in metal-api; retried with backoff.
    #[error("{0}")]
    Invalid(String),
    /// The object changed between capms reading it and a guarded write; the watch brings the
    /// newer version.
    #[error(
        "{operation}: the object changed while capms wrote to it; retrying with the newer version"
    )]
    Changed { operation: String },
}

impl Error {
    /// `source` met while `operation` (naming the object).
    pub fn kube(operation: impl Into<String>, source: kube::Error) -> Error {
        Error::Kube {
            operation: operation.into(),
            source,
        }
    }

    pub fn category(&self) -> Category {
        match self {
            Error::Kube {
                source: kube::Error::Api(s),
                ..
            } if s.code == 409 => Category::KubeConflict,
            Error::Changed { .. } => Category::KubeConflict,
            Error::Kube { .. } => Category::KubeApi,
            Error::Metal(e) => Category::Metal(e.category()),
            Error::Credentials(e) if e.is_transient() => Category::KubeApi,
            Error::Credentials(_) => Category::Credentials,
            Error::Invalid(_) => Category::InvalidSpec,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Names the operation of a Kubernetes call's error: `api.get(..).await.during(|| "reading …")`.
pub trait During<T> {
    fn during<S: Into<String>>(self, operation: impl FnOnce() -> S) -> Result<T>;
}

impl<T> During<T> for std::result::Result<T, kube::Error> {
    fn during<S: Into<String>>(self, operation: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|source| Error::kube(operation(), source))
    }
}

/// What went wrong in a reconcile, as a closed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// Someone else wrote the object first; retried at once with the newer version.
    KubeConflict,
    KubeApi,
    /// Something a person has to fix in a spec.
    InvalidSpec,
    /// The credentials Secret a cluster names is missing or of the wrong shape.
    Credentials,
    Metal(metal_api::error::Category),
}

impl Category {
    /// snake_case, for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Category::KubeConflict => "kube_conflict",
            Category::KubeApi => "kube_api",
            Category::InvalidSpec => "invalid_spec",
            Category::Credentials => "credentials_invalid",
            Category::Metal(c) => c.label(),
        }
    }

    /// PascalCase, for condition reasons.
    pub fn reason(self) -> &'static str {
        match self {
            Category::KubeConflict => "KubernetesConflict",
            Category::KubeApi => "KubernetesAPIError",
            Category::InvalidSpec => "InvalidSpec",
            Category::Credentials => "CredentialsInvalid",
            Category::Metal(c) => c.reason(),
        }
    }

    /// Can a later retry succeed without anyone changing anything?
    pub fn is_transient(self) -> bool {
        match self {
            Category::KubeConflict | Category::KubeApi => true,
            Category::InvalidSpec | Category::Credentials => false,
            Category::Metal(c) => c.is_transient(),
        }
    }
}
