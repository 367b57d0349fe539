//! The manager runtime: clients, the health, metrics and webhook servers, leader gating, the
//! controllers and an orderly shutdown, started from one [`ManagerConfig`]. `capms manager`
//! parses its flags into one and calls [`run_manager`]; tests can start it in-process.

use crate::cache::catalog::CatalogCache;
use crate::cache::catalogs::Catalogs;
use crate::cache::credentials::MetalClients;
use crate::controllers;
use crate::conversion;
use crate::leader;
use crate::reconciler::{Context, Settings};
use crate::server::{self, Readiness, tls::ReloadingCert};
use crate::webhooks;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Concurrent reconciles per controller unless `--concurrency` says otherwise. Measured with
/// `make bench` (200 machines): at 10, the first burst of machines of each cluster, woken
/// together when the cluster is provisioned, queued for up to 5 s before allocation; at 30 they
/// did not (p90 owner reference → allocated 2.4 s instead of 4.9 s).
pub const DEFAULT_CONCURRENCY: u16 = 30;

/// Lease timings when replicas elect a leader.
#[derive(Clone, Debug)]
pub struct LeaderElection {
    /// Namespace of the `capms-controller-leader` Lease.
    pub namespace: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Everything the manager needs to run.
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    /// Kubeconfig to use; `None`: `$KUBECONFIG`, then the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    pub metal: metal_api::Config,
    /// Only watch this namespace.
    pub namespace: Option<String>,
    /// Only reconcile objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    /// `Some`: only the elected leader reconciles.
    pub leader_election: Option<LeaderElection>,
    /// Concurrent reconciles per controller ([`DEFAULT_CONCURRENCY`] unless told).
    pub concurrency: u16,
    /// How often a provisioned object is looked at again without an event.
    pub sync_period: Duration,
    /// How long a rolling-in firewall may take to become ready.
    pub firewall_rollout_deadline: Duration,
    /// How long a new machine waits while its MachineSet creates its other replicas.
    pub machine_set_wait: Duration,
    /// How many machines reported provisioned may wait for Cluster API at once.
    pub handoff_window: u16,
    /// How often the orphan sweep looks (zero: never) and how long an owner must be gone.
    pub orphan_sweep_interval: Duration,
    pub orphan_grace: Duration,
    pub health_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// Serve `/metrics` over HTTPS to callers the apiserver authenticates and authorizes
    /// (TokenReview and SubjectAccessReview); `false`: plain HTTP to anyone.
    pub metrics_secure: bool,
    /// `tls.crt` and `tls.key` of the secure metrics server (re-read when they change).
    pub metrics_cert_dir: PathBuf,
    pub webhook_addr: SocketAddr,
    /// Directory with `tls.crt` and `tls.key` (re-read when they change).
    pub webhook_cert_dir: PathBuf,
    /// Admission denies (instead of admitting with a warning) while metal-api is unreachable.
    pub deny_when_metal_unreachable: bool,
    /// How often the admission catalog is refreshed from metal-api.
    pub catalog_refresh: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    KubeClient(#[from] crate::kube_client::KubeClientError),
    #[error("connecting to the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("metal-api client: {0}")]
    Metal(#[from] metal_api::Error),
    #[error("lost leadership; exiting so that a fresh start rejoins the election")]
    LostLeadership,
}

/// A future every task can wait on: resolved once, by the caller's shutdown.
pub(crate) type Shutdown = Shared<BoxFuture<'static, ()>>;

/// Resolves on SIGINT or SIGTERM.
pub fn shutdown_signal() -> Shutdown {
    async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
    }
    .boxed()
    .shared()
}

/// This replica's name in the leader election: the pod's name and the process id.
fn identity() -> String {
    format!(
        "{}-{}",
        std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "capms".into()),
        std::process::id()
    )
}

/// Runs the manager until `shutdown` resolves (or leadership is lost).
pub async fn run_manager(config: ManagerConfig, shutdown: Shutdown) -> Result<(), RuntimeError> {
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let client = crate::kube_client::connect(config.kubeconfig.as_ref(), metrics.clone()).await?;
    let observer = crate::reconciler::crash_points::observing(metrics.clone());
    let metal = metal_api::Client::new(config.metal.clone())?.with_observer(observer);
    let clients = Arc::new(MetalClients::new(metal.clone(), client.clone()));
    clients.spawn_token_keeper();
    let own = CatalogCache::new(metal, config.catalog_refresh);
    let catalogs = Catalogs::new(own, clients, config.catalog_refresh);
    catalogs.spawn_refresher();
    let identity = identity();
    let settings = Settings {
        namespace: config.namespace.clone(),
        watch_filter: config.watch_filter.clone().filter(|f| !f.is_empty()),
        concurrency: config.concurrency,
        sync_period: config.sync_period,
        firewall_rollout_deadline: config.firewall_rollout_deadline,
        machine_set_wait: config.machine_set_wait,
        handoff_window: config.handoff_window,
        orphan_sweep: (config.orphan_sweep_interval, config.orphan_grace),
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        settings,
        Some(identity.clone()),
        metrics.clone(),
        catalogs.clone(),
    ));
    let readiness = Arc::new(Readiness::default());
    let health = tokio::spawn(server::serve_plain(
        config.health_addr,
        server::health_router(readiness.clone()),
        shutdown.clone(),
    ));
    let metrics_server = start_metrics(&config, metrics.clone(), &client, &shutdown);
    let webhook_state = webhooks::WebhookState {
        client: client.clone(),
        caches: ctx.caches.clone(),
        catalogs,
        deny_when_metal_unreachable: config.deny_when_metal_unreachable,
        metrics,
    };
    let (webhook_handle, webhooks) = start_webhooks(&config, webhook_state, &readiness, &shutdown);
    readiness.set_started();
    tracing::info!(identity, namespace = ?config.namespace, watch_filter = ?config.watch_filter, leader_elect = config.leader_election.is_some(), "capms manager starting");

    let result = run_controllers(&config, client, identity, ctx, &readiness, &shutdown).await;
    webhook_handle.graceful_shutdown(Some(Duration::from_secs(5)));
    let _ = webhooks.await;
    health.abort();
    metrics_server.abort();
    result
}

/// `/metrics` on every replica: HTTPS with authentication and authorization through the
/// apiserver, or plain HTTP when `metrics_secure` is off.
fn start_metrics(
    config: &ManagerConfig,
    metrics: Arc<crate::metrics::Metrics>,
    client: &kube::Client,
    shutdown: &Shutdown,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    if !config.metrics_secure {
        let router = server::metrics_router(metrics, None);
        return tokio::spawn(server::serve_plain(
            config.metrics_addr,
            router,
            shutdown.clone(),
        ));
    }
    let auth = server::metrics_auth::MetricsAuth::new(client.clone());
    let router = server::metrics_router(metrics, Some(auth));
    let cert = ReloadingCert::new(&config.metrics_cert_dir);
    let handle = axum_server::Handle::new();
    stop_on(&handle, shutdown);
    tokio::spawn(server::serve_tls(config.metrics_addr, router, cert, handle))
}

/// Tells a TLS server to finish its connections (5 s at most) once `shutdown` resolves.
fn stop_on(handle: &axum_server::Handle<SocketAddr>, shutdown: &Shutdown) {
    let stop = handle.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        shutdown.await;
        stop.graceful_shutdown(Some(Duration::from_secs(5)));
    });
}

/// Webhooks serve on every replica, leader or not, from the moment a certificate is loaded.
fn start_webhooks(
    config: &ManagerConfig,
    state: webhooks::WebhookState,
    readiness: &Readiness,
    shutdown: &Shutdown,
) -> (
    axum_server::Handle<SocketAddr>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let cert = ReloadingCert::new(&config.webhook_cert_dir);
    if let Err(e) = cert.refresh() {
        tracing::warn!(error = %e, "webhook certificate not loaded yet; /readyz reports unready until it is");
    }
    let _ = readiness.webhook_cert.set(cert.clone());
    let handle = axum_server::Handle::new();
    let task = tokio::spawn(server::serve_tls(
        config.webhook_addr,
        webhooks::router(state).merge(conversion::review::router()),
        cert,
        handle.clone(),
    ));
    stop_on(&handle, shutdown);
    (handle, task)
}

/// The controllers, gated by leader election when it is configured.
async fn run_controllers(
    config: &ManagerConfig,
    client: kube::Client,
    identity: String,
    ctx: Arc<Context>,
    readiness: &Readiness,
    shutdown: &Shutdown,
) -> Result<(), RuntimeError> {
    let Some(election) = &config.leader_election else {
        readiness.leading.store(true, Ordering::SeqCst);
        controllers::run(ctx, shutdown.clone(), readiness.caches_synced.clone()).await;
        return Ok(());
    };
    let elector = leader::LeaderElector::new(
        client,
        leader::LeaseSettings {
            namespace: election.namespace.clone(),
            name: "capms-controller-leader".into(),
            identity,
            lease_duration: election.lease_duration,
            renew_deadline: election.renew_deadline,
            retry_period: election.retry_period,
        },
    );
    tokio::select! {
        _ = elector.acquire() => {}
        _ = shutdown.clone() => return Ok(()),
    }
    readiness.leading.store(true, Ordering::SeqCst);
    tokio::select! {
        _ = controllers::run(ctx, shutdown.clone(), readiness.caches_synced.clone()) => Ok(()),
        _ = elector.hold() => Err(RuntimeError::LostLeadership),
    }
}
