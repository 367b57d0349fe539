use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::time::Duration;

/// capms: Cluster API infrastructure provider for metal-stack.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every CustomResourceDefinition capms serves, as YAML.
    Crds {
        /// Write one file per CRD into this directory instead of printing them.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Run the controllers, the admission webhooks and the health and metrics endpoints.
    Manager(ManagerArgs),
    /// Print the webhook Service and configurations (generated from the server's route table).
    Webhooks {
        /// Point the configurations at this URL (a local apiserver) instead of the Service.
        #[arg(long, requires = "ca_file")]
        url: Option<String>,
        /// CA bundle the apiserver trusts for --url.
        #[arg(long)]
        ca_file: Option<std::path::PathBuf>,
    },
    /// Look at metal-api as an operator would (METAL_API_URL, METAL_API_HMAC, …).
    Metal {
        #[command(subcommand)]
        what: MetalCommand,
    },
    /// Run the metal-api simulator (for tests, demos and development; never for production).
    MetalSim(MetalSimArgs),
}

#[derive(Subcommand)]
enum MetalCommand {
    /// List machines: id, partition, size, rack, allocation, last event, liveliness, IPs.
    Machines,
}

#[derive(Args)]
struct ManagerArgs {
    /// Kubeconfig to use; default: $KUBECONFIG, then the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Only watch this namespace (default: all).
    #[arg(long)]
    namespace: Option<String>,
    /// Only reconcile objects labelled cluster.x-k8s.io/watch-filter=<value>.
    #[arg(long)]
    watch_filter: Option<String>,
    /// Elect a leader among replicas; only the leader reconciles.
    #[arg(long, default_value_t = false)]
    leader_elect: bool,
    /// How long a lease is valid without renewal.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: Duration,
    /// A leader that cannot renew for this long stops.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// Pause between leader election attempts.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: Duration,
    /// Namespace of the leader election Lease (default: $POD_NAMESPACE, else capms-system).
    #[arg(long, env = "POD_NAMESPACE", default_value = "capms-system")]
    leader_election_namespace: String,
    /// Concurrent reconciles per controller.
    #[arg(long, default_value_t = 10)]
    concurrency: u16,
    /// Address of /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:9440")]
    health_addr: std::net::SocketAddr,
    /// Address of /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: std::net::SocketAddr,
    /// Port of the admission webhooks (HTTPS).
    #[arg(long, default_value_t = 9443)]
    webhook_port: u16,
    /// Address the webhook server binds to.
    #[arg(long, default_value = "0.0.0.0")]
    webhook_host: std::net::IpAddr,
    /// Directory with tls.crt and tls.key of the webhook server (re-read when they change).
    #[arg(long, default_value_os_t = std::env::temp_dir().join("k8s-webhook-server/serving-certs"))]
    webhook_cert_dir: std::path::PathBuf,
    /// What admission does when metal-api cannot be reached: admit with a warning, or deny.
    #[arg(long, value_enum, default_value_t = MetalUnreachable::Admit)]
    metal_unreachable: MetalUnreachable,
    /// How often the metal-api catalog admission checks against is refreshed.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    catalog_refresh: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum MetalUnreachable {
    Admit,
    Deny,
}

#[derive(Args)]
struct MetalSimArgs {
    /// Address to listen on. Keep it on loopback.
    #[arg(long, default_value = "127.0.0.1:8080", env = "METAL_SIM_LISTEN")]
    listen: std::net::SocketAddr,
    /// Base path of every metal-api route, for example `/metal`.
    #[arg(long, default_value = "/")]
    base_path: String,
    /// Inventory YAML file; `builtin:default` (mini-lab on 127.0.0.0/8) or `builtin:seed000`.
    #[arg(long, default_value = "builtin:default")]
    inventory: String,
    /// HMAC key of the Metal-View identity.
    #[arg(
        long,
        default_value = "metal-view",
        env = "METAL_SIM_HMAC_VIEW_KEY",
        hide_env_values = true
    )]
    hmac_view_key: String,
    /// HMAC key of the Metal-Edit identity.
    #[arg(
        long,
        default_value = "metal-edit",
        env = "METAL_SIM_HMAC_EDIT_KEY",
        hide_env_values = true
    )]
    hmac_edit_key: String,
    /// HMAC key of the Metal-Admin identity.
    #[arg(
        long,
        default_value = "metal-admin",
        env = "METAL_SIM_HMAC_ADMIN_KEY",
        hide_env_values = true
    )]
    hmac_admin_key: String,
    /// Allocation → Installing.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    installing_after: Duration,
    /// Installing → Booting New Kernel.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    booting_after: Duration,
    /// Booting New Kernel → Phoned Home.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    phoned_home_after: Duration,
    /// Free → IPs released.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    ip_release_after: Duration,
    /// IPs released → Waiting again.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    reclaim_after: Duration,
}

/// `250ms`, `2s`, `1m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number with a unit (ms, s, m)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{text:?}: unknown unit {unit:?}; valid: ms, s, m")),
    }
}

fn main() -> anyhow::Result<()> {
    capms::tls::install_default_provider();
    let cli = Cli::parse();
    match cli.command {
        Command::Crds { dir } => {
            let files = capms::api::crd_files().context("rendering the CRDs as YAML")?;
            match dir {
                Some(dir) => {
                    for (name, yaml) in files {
                        let path = dir.join(name);
                        std::fs::write(&path, yaml)
                            .with_context(|| format!("writing {}", path.display()))?;
                    }
                }
                None => files.iter().for_each(|(_, yaml)| print!("{yaml}")),
            }
            Ok(())
        }
        Command::Webhooks { url: None, .. } => {
            print!(
                "{}",
                capms::webhooks::install_manifests_yaml()
                    .context("rendering the webhook manifests")?
            );
            Ok(())
        }
        Command::Webhooks {
            url: Some(base),
            ca_file,
        } => {
            let ca_bundle = match &ca_file {
                Some(path) => {
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
                }
                None => anyhow::bail!("--url needs --ca-file"),
            };
            let config = capms::webhooks::ClientConfig::Url { base, ca_bundle };
            for doc in capms::webhooks::webhook_configurations(&config, None) {
                println!("---\n{}", serde_saphyr::to_string(&doc)?);
            }
            Ok(())
        }
        Command::Metal {
            what: MetalCommand::Machines,
        } => tokio::runtime::Runtime::new()?.block_on(metal_machines()),
        Command::Manager(args) => {
            capms::telemetry::init_logging();
            tokio::runtime::Runtime::new()?.block_on(manager(args))
        }
        Command::MetalSim(args) => {
            capms::telemetry::init_logging();
            tokio::runtime::Runtime::new()?.block_on(metal_sim(args))
        }
    }
}

async fn metal_sim(args: MetalSimArgs) -> anyhow::Result<()> {
    use capms::metal::hmac::AuthType;
    use capms::sim::{HmacKeys, Sim, SimConfig, Timings, inventory::Inventory};
    let inventory = match args.inventory.as_str() {
        "builtin:default" => Inventory::default_lab(),
        "builtin:seed000" => Inventory::seed000(),
        path => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading inventory {path}"))?;
            Inventory::parse(&text).map_err(|e| anyhow::anyhow!("inventory {path}: {e}"))?
        }
    };
    let config = SimConfig {
        base_path: args.base_path,
        keys: HmacKeys {
            keys: [
                (AuthType::View, args.hmac_view_key),
                (AuthType::Edit, args.hmac_edit_key),
                (AuthType::Admin, args.hmac_admin_key),
            ]
            .into(),
        },
        timings: Timings {
            installing: args.installing_after,
            booting: args.booting_after,
            phoned_home: args.phoned_home_after,
            ip_release: args.ip_release_after,
            reclaim: args.reclaim_after,
        },
    };
    let sim = Sim::new(&inventory, config)
        .map_err(|e| anyhow::anyhow!("inventory {}: {e}", args.inventory))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, base_path = %sim.config.base_path, machines = sim.state().machines.len(), "metal-api simulator listening");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    capms::sim::serve(listener, sim, shutdown)
        .await
        .context("serving")?;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM; cloneable, so every task can wait on it.
fn shutdown_signal() -> futures::future::Shared<futures::future::BoxFuture<'static, ()>> {
    use futures::FutureExt;
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

async fn manager(args: ManagerArgs) -> anyhow::Result<()> {
    use capms::controllers::{self, Context, Settings, leader};
    use std::sync::Arc;
    let client = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await?;
            kube::Client::try_from(config)?
        }
        None => kube::Client::try_default()
            .await
            .context("no kubeconfig and not in a cluster")?,
    };
    let metal = capms::metal::Client::new(capms::metal::Config::from_env()?)?;
    let catalog = capms::webhooks::catalog::CatalogCache::new(metal.clone());
    catalog.spawn_refresher(args.catalog_refresh);
    let identity = format!(
        "{}-{}",
        std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "capms".into()),
        std::process::id()
    );
    let settings = Settings {
        namespace: args.namespace.clone(),
        watch_filter: args.watch_filter.clone().filter(|f| !f.is_empty()),
        concurrency: args.concurrency,
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        metal,
        settings,
        Some(identity.clone()),
    ));
    let shutdown = shutdown_signal();
    let readiness = Arc::new(capms::server::Readiness::default());
    let health = capms::server::serve_plain(
        args.health_addr,
        capms::server::health_router(readiness.clone()),
        shutdown.clone(),
    );
    let metrics = capms::server::serve_plain(
        args.metrics_addr,
        capms::server::metrics_router(),
        shutdown.clone(),
    );
    let health = tokio::spawn(health);
    let metrics = tokio::spawn(metrics);

    // Webhooks serve on every replica, leader or not.
    let cert = capms::server::tls::ReloadingCert::new(&args.webhook_cert_dir);
    if let Err(e) = cert.refresh() {
        tracing::warn!(error = %e, "webhook certificate not loaded yet; /readyz reports unready until it is");
    }
    let _ = readiness.webhook_cert.set(cert.clone());
    let webhook_state = capms::webhooks::WebhookState {
        client: Some(client.clone()),
        catalog,
        deny_when_metal_unreachable: args.metal_unreachable == MetalUnreachable::Deny,
    };
    let webhook_handle = axum_server::Handle::new();
    let webhook_addr = std::net::SocketAddr::new(args.webhook_host, args.webhook_port);
    let webhooks = tokio::spawn(capms::server::serve_tls(
        webhook_addr,
        capms::webhooks::router(webhook_state),
        cert,
        webhook_handle.clone(),
    ));
    {
        let shutdown = shutdown.clone();
        let handle = webhook_handle.clone();
        tokio::spawn(async move {
            shutdown.await;
            handle.graceful_shutdown(Some(Duration::from_secs(5)));
        });
    }
    readiness.set_started();
    tracing::info!(identity, namespace = ?args.namespace, watch_filter = ?args.watch_filter, leader_elect = args.leader_elect, "capms manager starting");

    if args.leader_elect {
        let elector = leader::LeaderElector::new(
            client,
            leader::LeaseSettings {
                namespace: args.leader_election_namespace.clone(),
                name: "capms-controller-leader".into(),
                identity,
                lease_duration: args.leader_elect_lease_duration,
                renew_deadline: args.leader_elect_renew_deadline,
                retry_period: args.leader_elect_retry_period,
            },
        );
        tokio::select! {
            _ = elector.acquire() => {}
            _ = shutdown.clone() => return Ok(()),
        }
        readiness
            .leading
            .store(true, std::sync::atomic::Ordering::SeqCst);
        tokio::select! {
            _ = controllers::run(ctx, shutdown.clone(), readiness.caches_synced.clone()) => {}
            _ = elector.hold() => anyhow::bail!("lost leadership; exiting so that a fresh start rejoins the election"),
        }
    } else {
        readiness
            .leading
            .store(true, std::sync::atomic::Ordering::SeqCst);
        controllers::run(ctx, shutdown.clone(), readiness.caches_synced.clone()).await;
    }
    webhook_handle.graceful_shutdown(Some(Duration::from_secs(5)));
    let _ = webhooks.await;
    health.abort();
    metrics.abort();
    Ok(())
}

async fn metal_machines() -> anyhow::Result<()> {
    let client = capms::metal::Client::new(capms::metal::Config::from_env()?)?;
    let machines = client.machine_find(&Default::default()).await?;
    println!(
        "{:<38} {:<10} {:<14} {:<8} {:<28} {:<20} {:<9} IPS",
        "ID", "PARTITION", "SIZE", "RACK", "ALLOCATION", "LAST EVENT", "LIVE"
    );
    for m in machines {
        let allocation = m
            .allocation
            .as_ref()
            .map(|a| format!("{} ({})", a.hostname, a.role))
            .unwrap_or_else(|| "-".into());
        let ips: Vec<String> = m
            .allocation
            .iter()
            .flat_map(|a| a.networks.iter().flat_map(|n| n.ips.clone()))
            .collect();
        println!(
            "{:<38} {:<10} {:<14} {:<8} {:<28} {:<20} {:<9} {}",
            m.id,
            m.partition.as_ref().map(|p| p.id.as_str()).unwrap_or("-"),
            m.size.as_ref().map(|s| s.id.as_str()).unwrap_or("-"),
            m.rackid,
            allocation,
            m.last_event().unwrap_or("-"),
            m.liveliness,
            ips.join(",")
        );
    }
    Ok(())
}
