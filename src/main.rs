use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::time::Duration;

/// mimalloc instead of glibc's malloc: at 1,000 machines a profile put about a fifth of capms's
/// CPU into glibc's malloc and free (decoding watch events and listings allocates a lot of
/// short-lived strings). With it, `make bench` at 1,000 machines used 13.1 CPU seconds instead
/// of about 22. Built without transparent huge pages (`no_thp`): with them its arenas' 2 MiB
/// pages took the peak RSS from about 70 to 109 MiB. `capms::memory` sets when it returns freed
/// pages.
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
    /// Concurrent reconciles per controller. Reconciles mostly wait on the apiserver and
    /// metal-api, so a burst of new machines (a MachineDeployment scaled up) needs many at once.
    #[arg(long, default_value_t = capms::runtime::DEFAULT_CONCURRENCY)]
    concurrency: u16,
    /// How often a provisioned MetalStackCluster, firewall or machine is looked at again in
    /// metal-api without an event: a machine freed or reassigned outside capms is reported within
    /// this period.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    sync_period: Duration,
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
    /// a miss too, so a new image or size is known at once).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
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
    /// Play the machines' operating system too: for machines that phoned home with kubeadm
    /// bootstrap data, run the workload cluster (etcd and kube-apiserver on loopback) and its
    /// Nodes, keeping each cluster's data in DIR/<namespace>.<name>.
    #[arg(long, value_name = "DIR", requires = "kube_bin")]
    workloads: Option<std::path::PathBuf>,
    /// Directory holding the `etcd` and `kube-apiserver` binaries the workload clusters run.
    #[arg(long, value_name = "DIR")]
    kube_bin: Option<std::path::PathBuf>,
    /// The kubelet stand-in (tests/kubelet) serving port forwarding on control-plane machines,
    /// which the kubeadm control-plane provider's etcd and certificate checks use.
    #[arg(long, value_name = "FILE")]
    kubelet: Option<std::path::PathBuf>,
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
    capms::memory::release_freed_memory_promptly();
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
        } => {
            let client = capms::metal::Client::new(capms::metal::Config::from_env()?)?;
            let machines = tokio::runtime::Runtime::new()?
                .block_on(client.machine_find(&Default::default()))?;
            print!("{}", capms::metal::table::machines(&machines));
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
        Command::MetalSim(args) => {
            capms::telemetry::init_logging();
            let inventory = capms::sim::inventory::Inventory::load(&args.inventory)
                .map_err(|e| anyhow::anyhow!("inventory {}: {e}", args.inventory))?;
            let listen = args.listen;
            let agent = args.agent_config();
            let shutdown = capms::runtime::shutdown_signal();
            tokio::runtime::Runtime::new()?
                .block_on(capms::sim::run(
                    listen,
                    &inventory,
                    args.into_config(),
                    agent,
                    shutdown,
                ))
                .with_context(|| format!("serving the simulator on {listen}"))
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
            metal: capms::metal::Config::from_env()?,
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

impl MetalSimArgs {
    fn agent_config(&self) -> Option<capms::sim::workload::AgentConfig> {
        let (dir, bin) = (self.workloads.clone()?, self.kube_bin.clone()?);
        Some(capms::sim::workload::AgentConfig {
            binaries: capms::sim::workload::member::Binaries {
                etcd: bin.join("etcd"),
                kube_apiserver: bin.join("kube-apiserver"),
                kubelet: self.kubelet.clone(),
            },
            dir,
            period: Duration::from_secs(1),
        })
    }

    fn into_config(self) -> capms::sim::SimConfig {
        use capms::metal::hmac::AuthType;
        capms::sim::SimConfig {
            base_path: self.base_path,
            keys: capms::sim::HmacKeys {
                keys: [
                    (AuthType::View, self.hmac_view_key),
                    (AuthType::Edit, self.hmac_edit_key),
                    (AuthType::Admin, self.hmac_admin_key),
                ]
                .into(),
            },
            timings: capms::sim::Timings {
                installing: self.installing_after,
                booting: self.booting_after,
                phoned_home: self.phoned_home_after,
                ip_release: self.ip_release_after,
                reclaim: self.reclaim_after,
            },
        }
    }
}
