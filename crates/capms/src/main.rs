use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use metalstack_api::types::token::TokenServiceCreateRequest;
use std::time::Duration;

/// mimalloc instead of glibc's malloc: at 1,000 machines a profile put about a fifth of capms's
/// CPU into glibc's malloc and free (decoding watch events and listings allocates a lot of
/// short-lived strings). With it, `make bench` at 1,000 machines used 13.1 CPU seconds instead
/// of about 22. Built without transparent huge pages (`no_thp`): with them its arenas' 2 MiB
/// pages took the peak RSS from about 70 to 109 MiB.
///
/// When freed pages go back to the system is mimalloc's `MIMALLOC_PURGE_DELAY` (milliseconds;
/// its default is 1000), which the manager's Deployment and image set to 100: capms allocates in
/// bursts (each watch event and metal-api listing decodes into many short-lived strings), pages
/// held after a burst count in its RSS, and purging sooner costs CPU as the next burst faults
/// them in again. At 1,000 machines: purging at once, a 67.9 MiB peak; after 10 ms, 15.4 to 16.1
/// CPU s; after 1 s, 13.1 to 14.9 CPU s and about 71 MiB; after 100 ms, 14.3 CPU s and 62.5 MiB.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        /// Point the conversion webhook at this URL (a local apiserver) instead of the Service.
        #[arg(long, requires = "ca_file")]
        conversion_url: Option<String>,
        /// CA bundle the apiserver trusts for --conversion-url.
        #[arg(long)]
        ca_file: Option<std::path::PathBuf>,
    },
    /// Run the controllers, the admission webhooks and the health and metrics endpoints.
    Manager(Box<ManagerArgs>),
    /// Print the webhook Service and configurations (generated from the server's route table).
    Webhooks {
        /// Point the configurations at this URL (a local apiserver) instead of the Service.
        #[arg(long, requires = "ca_file")]
        url: Option<String>,
        /// CA bundle the apiserver trusts for --url.
        #[arg(long)]
        ca_file: Option<std::path::PathBuf>,
        /// The user the manager runs as with --url, whose own updates the apiserver need not
        /// send (the installed manifests name the manager's ServiceAccount).
        #[arg(long, requires = "url")]
        manager_user: Option<String>,
    },
    /// Print, as JSON, the `TokenService/Create` request for a metal-apiserver project token
    /// that capms can manage the project's clusters with: editor of the project, allowed the
    /// methods of visibility SELF that capms calls. Send it to metal-apiserver with a token
    /// allowed to create it; the answer's `secret` is the credentials Secret's `token`.
    TokenRequest {
        /// The project the clusters are in.
        #[arg(long)]
        project: String,
        /// How long the token lives: capms refreshes it before a quarter of this is left
        /// (metal-apiserver takes 10m to a year).
        #[arg(long, default_value = "8h", value_parser = parse_duration)]
        expires: Duration,
    },
    /// Look at metal-api as an operator would (METAL_API_URL, METAL_API_HMAC, …).
    Metal {
        #[command(subcommand)]
        what: MetalCommand,
    },
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
    /// Concurrent reconciles per controller. Reconciles mostly wait on the apiserver and
    /// metal-api, so a burst of new machines (a MachineDeployment scaled up) needs many at once.
    #[arg(long, default_value_t = capms::runtime::DEFAULT_CONCURRENCY)]
    concurrency: u16,
    /// How often a provisioned MetalStackCluster, firewall or machine is looked at again in
    /// metal-api without an event: a machine freed or reassigned outside capms is reported within
    /// this period.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    sync_period: Duration,
    /// How long a firewall rolling in for a changed firewall spec may take to phone home and
    /// become ready; after that capms frees it, keeps the serving firewall and tries again
    /// after a backoff.
    #[arg(long, default_value = "20m", value_parser = parse_duration)]
    firewall_rollout_deadline: Duration,
    /// A new MetalStackMachine of a MachineSet still creating its replicas waits before capms
    /// takes it up (each step capms takes wakes Cluster API's Machine controller, which shares
    /// its client rate limit with the MachineSet creating the rest), until the MachineSet
    /// reports all its replicas, wants no more, or has created none for this long; never longer
    /// than ten times this from the replica's creation (0s: no wait).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    machine_set_wait: Duration,
    /// How many machines capms has reported provisioned may wait at once for Cluster API's
    /// Machine controller to take them up (copy their spec.providerID); the next wait,
    /// unwritten, until it has, or for 10 s at most. Each handoff sets that controller to
    /// several writes, which an apiserver short of CPU refuses as conflicts when many come at
    /// once; a window spares it those, at the cost of reporting machines later (0: no window).
    #[arg(long, default_value_t = capms::reconciler::DEFAULT_HANDOFF_WINDOW)]
    handoff_window: u16,
    /// How often capms looks in metal-api for what it allocated for a MetalStackMachine,
    /// MetalStackFirewall or MetalStackCluster that is gone without it being freed, in the
    /// clusters it manages (neither paused nor being moved), and frees it once the owner has been
    /// gone for --orphan-grace (0s: never; then a MetalStackMachine or MetalStackFirewall deleted
    /// between its machine's allocation and the write naming it, which adds capms's finalizer,
    /// leaves that machine allocated).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    orphan_sweep_interval: Duration,
    /// How long an allocation's owner must have been gone, look after look, before the orphan
    /// sweep frees it: longer than a restore from backup takes to bring a cluster's objects back.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    orphan_grace: Duration,
    /// Address of /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:9440")]
    health_addr: std::net::SocketAddr,
    /// Address of /metrics.
    #[arg(long, default_value = "0.0.0.0:8443")]
    metrics_addr: std::net::SocketAddr,
    /// Serve /metrics over HTTPS to callers allowed to get it (TokenReview and
    /// SubjectAccessReview through the apiserver); `--metrics-secure=false` for plain HTTP.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    metrics_secure: bool,
    /// tls.crt and tls.key of the secure metrics server; default: the webhook certificate.
    #[arg(long)]
    metrics_cert_dir: Option<std::path::PathBuf>,
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
    /// How often the metal-api catalog admission checks against is refreshed (it is refreshed on
    /// a miss too, so a new image or size is known at once). Firewall image auto-updates read
    /// the same catalog, so they see a new image within this period.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    catalog_refresh: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum MetalUnreachable {
    Admit,
    Deny,
}

/// `250ms`, `2s`, `1m`: jiff's friendly duration format.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let span: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("{text:?}: {e}; valid: a duration such as 250ms, 2s or 1m"))?;
    Duration::try_from(span).map_err(|_| format!("{text:?}: a duration must not be negative"))
}

fn main() -> anyhow::Result<()> {
    capms::tls::install_default_provider();
    let cli = Cli::parse();
    match cli.command {
        Command::Crds {
            dir,
            conversion_url,
            ca_file,
        } => {
            let crds = match (conversion_url, ca_file) {
                (Some(url), Some(path)) => {
                    let ca = std::fs::read(&path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    capms::api::crds_converting_at(&url, &ca)
                }
                _ => capms::api::crds(),
            };
            let files = capms::api::render(crds).context("rendering the CRDs as YAML")?;
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
            manager_user,
        } => {
            let ca_bundle = match &ca_file {
                Some(path) => {
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
                }
                None => anyhow::bail!("--url needs --ca-file"),
            };
            let config = capms::webhooks::ClientConfig::Url { base, ca_bundle };
            let configurations =
                capms::webhooks::webhook_configurations(&config, None, manager_user.as_deref());
            for doc in configurations {
                println!("---\n{}", serde_saphyr::to_string(&doc)?);
            }
            Ok(())
        }
        Command::TokenRequest { project, expires } => {
            // The protos' bounds on TokenServiceCreateRequest.expires.
            let (shortest, longest) = (Duration::from_secs(600), Duration::from_secs(31_536_000));
            if expires < shortest || expires > longest {
                anyhow::bail!(
                    "--expires {expires:?}: metal-apiserver takes a lifetime from 10m to 365d"
                );
            }
            let request = TokenServiceCreateRequest::for_capms(&project, expires.as_secs());
            println!("{}", serde_json::to_string_pretty(&request)?);
            Ok(())
        }
        Command::Metal {
            what: MetalCommand::Machines,
        } => {
            let client = metal_api::Client::new(metal_api::Config::from_env()?)?;
            let machines = tokio::runtime::Runtime::new()?
                .block_on(client.machine_find(&Default::default()))?;
            print!("{}", metal_api::table::machines(&machines));
            Ok(())
        }
        Command::Manager(args) => {
            capms::telemetry::init_logging();
            let config = args.into_config()?;
            let shutdown = capms::runtime::shutdown_signal();
            tokio::runtime::Runtime::new()?
                .block_on(capms::runtime::run_manager(config, shutdown))?;
            Ok(())
        }
    }
}

impl ManagerArgs {
    fn into_config(self) -> anyhow::Result<capms::runtime::ManagerConfig> {
        // A zero period would reconcile every provisioned object in a loop.
        anyhow::ensure!(
            self.sync_period >= Duration::from_secs(1),
            "--sync-period: {:?} is too short; valid: 1s or more (default 5m)",
            self.sync_period
        );
        Ok(capms::runtime::ManagerConfig {
            kubeconfig: self.kubeconfig,
            metal: metal_api::Config::from_env()?,
            namespace: self.namespace,
            watch_filter: self.watch_filter,
            leader_election: self.leader_elect.then_some(capms::runtime::LeaderElection {
                namespace: self.leader_election_namespace,
                lease_duration: self.leader_elect_lease_duration,
                renew_deadline: self.leader_elect_renew_deadline,
                retry_period: self.leader_elect_retry_period,
            }),
            concurrency: self.concurrency,
            sync_period: self.sync_period,
            firewall_rollout_deadline: self.firewall_rollout_deadline,
            machine_set_wait: self.machine_set_wait,
            handoff_window: self.handoff_window,
            orphan_sweep_interval: self.orphan_sweep_interval,
            orphan_grace: self.orphan_grace,
            health_addr: self.health_addr,
            metrics_addr: self.metrics_addr,
            metrics_secure: self.metrics_secure,
            metrics_cert_dir: self
                .metrics_cert_dir
                .unwrap_or_else(|| self.webhook_cert_dir.clone()),
            webhook_addr: std::net::SocketAddr::new(self.webhook_host, self.webhook_port),
            webhook_cert_dir: self.webhook_cert_dir,
            deny_when_metal_unreachable: self.metal_unreachable == MetalUnreachable::Deny,
            catalog_refresh: self.catalog_refresh,
        })
    }
}
