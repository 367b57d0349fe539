//! A metal-api simulator, faithful to the behaviour capms depends on: HMAC auth and roles,
//! string-wrapped errors, allocation and network rules, IPAM, and the asynchronous machine
//! lifecycle on timers. The `metal-sim` binary of this crate runs it (`make demo`); the tests
//! and the benchmark start it in-process.

mod driver;
mod http;
pub mod inventory;
pub mod ipam;
pub mod state;
pub mod stats;
pub mod v2;
pub mod workload;

use inventory::Inventory;
use metal_api::hmac::AuthType;
use state::State;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use http::{mounted_routes, router};

/// Delays of the simulated machine lifecycle.
#[derive(Clone, Debug)]
pub struct Timings {
    /// Allocation → `Installing`.
    pub installing: Duration,
    /// `Installing` → `Booting New Kernel`.
    pub booting: Duration,
    /// `Booting New Kernel` → `Phoned Home`.
    pub phoned_home: Duration,
    /// Free → its IPs are released (a network free fails until then).
    pub ip_release: Duration,
    /// IP release → the machine is back in `Waiting`.
    pub reclaim: Duration,
}

impl Timings {
    /// The pace of a real lab, shortened: seconds rather than minutes.
    pub fn lab() -> Timings {
        Timings {
            installing: Duration::from_secs(2),
            booting: Duration::from_secs(5),
            phoned_home: Duration::from_secs(3),
            ip_release: Duration::from_secs(2),
            reclaim: Duration::from_secs(5),
        }
    }

    /// Fast enough for tests, slow enough that every intermediate state can be observed.
    pub fn fast() -> Timings {
        Timings {
            installing: Duration::from_millis(100),
            booting: Duration::from_millis(100),
            phoned_home: Duration::from_millis(100),
            ip_release: Duration::from_millis(300),
            reclaim: Duration::from_millis(200),
        }
    }
}

/// The HMAC keys the simulator accepts, one per identity, with their lifetimes.
#[derive(Clone)]
pub struct HmacKeys {
    pub keys: BTreeMap<AuthType, String>,
}

impl HmacKeys {
    /// The keys of mini-lab and capi-lab: `metal-view`, `metal-edit`, `metal-admin`.
    pub fn lab() -> HmacKeys {
        HmacKeys {
            keys: [
                (AuthType::View, "metal-view".to_owned()),
                (AuthType::Edit, "metal-edit".to_owned()),
                (AuthType::Admin, "metal-admin".to_owned()),
            ]
            .into(),
        }
    }
}

impl std::fmt::Debug for HmacKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.keys.keys().map(|k| k.scheme()))
            .finish()
    }
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Base path of every route, `/` or for example `/metal`.
    pub base_path: String,
    pub keys: HmacKeys,
    pub timings: Timings,
    /// API v2 requests per token and minute (metal-apiserver's `--max-requests-per-minute`;
    /// 0: no limit).
    pub rate_limit: u32,
}

/// metal-apiserver's default rate limit per token and minute.
pub const DEFAULT_RATE_LIMIT: u32 = 100;

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            base_path: "/".into(),
            keys: HmacKeys::lab(),
            timings: Timings::lab(),
            rate_limit: DEFAULT_RATE_LIMIT,
        }
    }
}

/// A running simulator's shared state.
#[derive(Clone)]
pub struct Sim {
    state: Arc<Mutex<State>>,
    stats: Arc<Mutex<stats::RequestStats>>,
    /// The HMAC keys accepted now: the configured ones until `/sim/keys` rotates one.
    keys: Arc<Mutex<BTreeMap<AuthType, String>>>,
    /// API v2 tokens issued and not revoked.
    tokens: Arc<Mutex<v2::tokens::Tokens>>,
    /// API v2 requests of the current minute, by token.
    rates: Arc<Mutex<v2::rate::RateCounts>>,
    pub config: Arc<SimConfig>,
}

impl Sim {
    pub fn new(inventory: &Inventory, config: SimConfig) -> Result<Sim, String> {
        Ok(Sim {
            state: Arc::new(Mutex::new(State::from_inventory(inventory)?)),
            stats: Arc::default(),
            keys: Arc::new(Mutex::new(config.keys.keys.clone())),
            tokens: Arc::default(),
            rates: Arc::default(),
            config: Arc::new(config),
        })
    }

    /// The API v2 tokens.
    pub fn tokens(&self) -> MutexGuard<'_, v2::tokens::Tokens> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn rates(&self) -> MutexGuard<'_, v2::rate::RateCounts> {
        self.rates.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The HMAC key of `auth_type` accepted now.
    pub fn hmac_key(&self, auth_type: AuthType) -> Option<String> {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        keys.get(&auth_type).cloned()
    }

    /// Rotates the HMAC key of `auth_type`, as metal-api restarted with a new key: requests
    /// signed with the old one are refused from now on.
    pub fn rotate_hmac_key(&self, auth_type: AuthType, key: String) {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        keys.insert(auth_type, key);
    }

    /// The state; a poisoned lock (a panic while holding it) is taken over as is, since every
    /// mutation leaves the state consistent before it could panic.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The request counts (`/sim/stats`); poisoning is taken over as for the state.
    pub fn stats(&self) -> MutexGuard<'_, stats::RequestStats> {
        self.stats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Binds `listen` and serves a simulator of `inventory` until `shutdown` resolves; with `agent`
/// the machines' side runs too (see [`workload`]) and stops with it.
pub async fn run(
    listen: std::net::SocketAddr,
    inventory: &Inventory,
    config: SimConfig,
    agent: Option<workload::AgentConfig>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sim = Sim::new(inventory, config).map_err(std::io::Error::other)?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, base_path = %sim.config.base_path, machines = sim.state().machines.len(), "metal-api simulator listening");
    let agent = agent.map(|config| workload::Agent::spawn(sim.clone(), config));
    let served = serve(listener, sim, shutdown).await;
    if let Some(agent) = agent {
        // Dropping the agent's task stops every workload cluster's processes.
        agent.abort();
        let _ = agent.await;
    }
    served
}

/// Serves the simulator on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    sim: Sim,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(sim.clone());
    let listener = http::FaultyListener {
        inner: listener,
        sim,
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!("shutting down");
}

/// Logs on stderr; `RUST_LOG` filters (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
