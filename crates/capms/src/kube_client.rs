//! The Kubernetes client of the manager: from a kubeconfig or the pod's service account, with
//! every request counted in `rest_client_requests_total` (code, host, method, resource), so an
//! operator (and `make bench`) sees what capms costs the apiserver.

use crate::metrics::Metrics;
use axum::http::{Request, Response};
use futures::future::BoxFuture;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::{Context, Poll};

#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("connecting to the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("no kubeconfig and not in a cluster: {0}")]
    NoCluster(#[from] kube::config::InferConfigError),
}

/// A client from `kubeconfig` (else `$KUBECONFIG`, then in-cluster), counting into `metrics`.
pub async fn connect(
    kubeconfig: Option<&PathBuf>,
    metrics: Arc<Metrics>,
) -> Result<kube::Client, KubeClientError> {
    let config = match kubeconfig {
        None => kube::Config::infer().await?,
        Some(path) => {
            let read = |source| KubeClientError::Kubeconfig {
                path: path.clone(),
                source,
            };
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(read)?;
            let options = kube::config::KubeConfigOptions::default();
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(read)?
        }
    };
    let host = config.cluster_url.authority().map(ToString::to_string);
    let layer = CountRequests {
        metrics,
        host: Arc::from(host.unwrap_or_default()),
    };
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

/// The resource a Kubernetes API path addresses: the plural after the group/version (and
/// namespace), plus `/status` for the status subresource; `-` for anything else.
pub(crate) fn resource_of(path: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return "-".into(),
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    match rest {
        [] => "-".into(),
        [plural] | [plural, _] => (*plural).to_owned(),
        [plural, _, sub, ..] => format!("{plural}/{sub}"),
    }
}

/// Counts each request once its answer (or failure) is in.
#[derive(Clone)]
struct CountRequests {
    metrics: Arc<Metrics>,
    host: Arc<str>,
}

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            counter: self.clone(),
        }
    }
}

#[derive(Clone)]
struct Counted<S> {
    inner: S,
    counter: CountRequests,
}

impl<S, B, R> tower::Service<Request<B>> for Counted<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<R>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().as_str().to_owned();
        let resource = resource_of(request.uri().path());
        let counter = self.counter.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            let code = result.as_ref().ok().map(|r| r.status().as_u16());
            counter
                .metrics
                .kube_request(&counter.host, &method, &resource, code);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::resource_of;

    #[test]
    fn resources_are_named_by_their_plural() {
        let cases = [
            ("/api/v1/namespaces/ns/secrets/s", "secrets"),
            ("/api/v1/namespaces/ns/secrets", "secrets"),
            ("/api/v1/namespaces", "namespaces"),
            ("/api/v1/namespaces/ns", "namespaces"),
            (
                "/apis/infrastructure.cluster.x-k8s.io/v1alpha4/namespaces/ns/metalstackmachines/m/status",
                "metalstackmachines/status",
            ),
            ("/apis/cluster.x-k8s.io/v1beta2/machines", "machines"),
            (
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/capms",
                "leases",
            ),
            ("/apis", "-"),
            ("/version", "-"),
        ];
        for (path, want) in cases {
            assert_eq!(resource_of(path), want, "{path}");
        }
    }
}
