//! Who may read `/metrics`: as Cluster API providers do it, the caller's bearer token is checked
//! with a TokenReview and the user it names with a SubjectAccessReview for `get` on the
//! non-resource URL `/metrics` (grant it with the `capms-metrics-reader` ClusterRole). Decisions
//! are cached for a minute by a hash of the token, so a scraper costs the apiserver two requests
//! a minute, and the token itself is never kept.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a decision about a token is reused.
const DECISION_TTL: Duration = Duration::from_secs(60);
/// Decisions kept at most; the cache is cleared when it grows past this.
const MAX_DECISIONS: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenAccess {
    Allowed,
    /// The token is not valid (401).
    Unauthenticated,
    /// Valid, but the user may not get /metrics (403).
    Forbidden,
}

pub(crate) struct MetricsAuth {
    client: kube::Client,
    decisions: Mutex<HashMap<Vec<u8>, (Instant, TokenAccess)>>,
}

impl MetricsAuth {
    pub fn new(client: kube::Client) -> Arc<MetricsAuth> {
        Arc::new(MetricsAuth {
            client,
            decisions: Mutex::new(HashMap::new()),
        })
    }

    /// The decision for `token`, from the cache or the apiserver.
    pub(crate) async fn decide(&self, token: &str) -> Result<TokenAccess, kube::Error> {
        let key = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .to_vec();
        if let Some((at, decision)) = self.lock().get(&key)
            && at.elapsed() < DECISION_TTL
        {
            return Ok(*decision);
        }
        let decision = self.review(token).await?;
        let mut decisions = self.lock();
        if decisions.len() >= MAX_DECISIONS {
            decisions.clear();
        }
        decisions.insert(key, (Instant::now(), decision));
        Ok(decision)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, (Instant, TokenAccess)>> {
        self.decisions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn review(&self, token: &str) -> Result<TokenAccess, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = reviewed.status.unwrap_or_default();
        let (true, Some(user)) = (status.authenticated == Some(true), status.user) else {
            return Ok(TokenAccess::Unauthenticated);
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answered = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await?;
        Ok(if answered.status.is_some_and(|s| s.allowed) {
            TokenAccess::Allowed
        } else {
            TokenAccess::Forbidden
        })
    }
}

/// Middleware in front of `/metrics`: 401 without a valid bearer token, 403 without the right
/// to get /metrics, 503 while the apiserver cannot be asked.
pub(crate) async fn require_metrics_reader(
    State(auth): State<Arc<MetricsAuth>>,
    request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let Some(token) = token else {
        return (
            StatusCode::UNAUTHORIZED,
            "a bearer token is required for /metrics",
        )
            .into_response();
    };
    match auth.decide(&token).await {
        Ok(TokenAccess::Allowed) => next.run(request).await,
        Ok(TokenAccess::Unauthenticated) => {
            (StatusCode::UNAUTHORIZED, "the bearer token is not valid").into_response()
        }
        Ok(TokenAccess::Forbidden) => (
            StatusCode::FORBIDDEN,
            "this user may not get /metrics; bind the ClusterRole capms-metrics-reader",
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "reviewing a /metrics token failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the Kubernetes API cannot review the token right now",
            )
                .into_response()
        }
    }
}
