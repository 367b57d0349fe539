//! Leader election on a coordination.k8s.io Lease: one replica reconciles, the others wait and
//! take over when its lease expires. Webhooks serve on every replica regardless.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use std::time::Duration;

#[derive(Clone, Debug)]
pub(crate) struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down.
    pub renew_deadline: Duration,
    /// Pause between attempts.
    pub retry_period: Duration,
}

pub(crate) struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl LeaderElector {
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
        }
    }

    /// One attempt to take or renew the lease. Ok(true) means we hold it now.
    pub(crate) async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let s = &self.settings;
        let secs = i32::try_from(s.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&s.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(s.name.clone()),
                    namespace: Some(s.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(s.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let ours = spec.holder_identity.as_deref() == Some(s.identity.as_str());
        if !ours {
            let valid_for = Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(secs)).unwrap_or(0),
            );
            let expired = spec.renew_time.as_ref().is_none_or(|t| {
                let age = jiff::Timestamp::now().duration_since(t.0);
                age.as_secs_f64() > valid_for.as_secs_f64()
            });
            let released = spec.holder_identity.as_deref().is_none_or(str::is_empty);
            if !expired && !released {
                return Ok(false);
            }
            spec.holder_identity = Some(s.identity.clone());
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(secs);
        // replace carries the resourceVersion we read: a concurrent writer makes this a 409.
        match self
            .api
            .replace(&s.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(identity = %self.settings.identity, lease = %self.settings.name, "became leader");
                    return;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Renews the lease until it cannot be renewed within the deadline; returns then.
    pub async fn hold(&self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::error!(identity = %self.settings.identity, "lost the lease to another replica");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "renewing the lease failed"),
            }
            if last_renewal.elapsed() > self.settings.renew_deadline {
                tracing::error!(identity = %self.settings.identity, "could not renew the lease in time");
                return;
            }
        }
    }
}
