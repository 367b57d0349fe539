use anyhow::Context;
use clap::Parser;
use metal_api::hmac::AuthType;
use metal_sim::workload::{AgentConfig, member::Binaries};
use metal_sim::{HmacKeys, SimConfig, Timings};
use std::time::Duration;

/// metal-sim: a metal-api simulator (and, with --workloads, the machines' operating system) for
/// tests, demos and development; never for production.
#[derive(Parser)]
#[command(version, about)]
struct Args {
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
    /// The kubelet stand-in (tests/go/kubelet) serving port forwarding on control-plane
    /// machines, which the kubeadm control-plane provider's etcd and certificate checks use.
    #[arg(long, value_name = "FILE")]
    kubelet: Option<std::path::PathBuf>,
    /// API v2 requests each token may make per minute, as metal-apiserver's flag of that name
    /// (0: no limit).
    #[arg(long, default_value_t = metal_sim::DEFAULT_RATE_LIMIT)]
    max_requests_per_minute: u32,
}

/// `250ms`, `2s`, `1m`: jiff's friendly duration format.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let span: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("{text:?}: {e}; valid: a duration such as 250ms, 2s or 1m"))?;
    Duration::try_from(span).map_err(|_| format!("{text:?}: a duration must not be negative"))
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    metal_sim::init_logging();
    let args = Args::parse();
    let inventory = metal_sim::inventory::Inventory::load(&args.inventory)
        .map_err(|e| anyhow::anyhow!("inventory {}: {e}", args.inventory))?;
    let listen = args.listen;
    let agent = args.agent_config();
    tokio::runtime::Runtime::new()?
        .block_on(metal_sim::run(
            listen,
            &inventory,
            args.into_config(),
            agent,
            metal_sim::shutdown_signal(),
        ))
        .with_context(|| format!("serving the simulator on {listen}"))
}

impl Args {
    fn agent_config(&self) -> Option<AgentConfig> {
        let (dir, bin) = (self.workloads.clone()?, self.kube_bin.clone()?);
        Some(AgentConfig {
            binaries: Binaries {
                etcd: bin.join("etcd"),
                kube_apiserver: bin.join("kube-apiserver"),
                kubelet: self.kubelet.clone(),
            },
            dir,
            period: Duration::from_secs(1),
        })
    }

    fn into_config(self) -> SimConfig {
        SimConfig {
            base_path: self.base_path,
            keys: HmacKeys {
                keys: [
                    (AuthType::View, self.hmac_view_key),
                    (AuthType::Edit, self.hmac_edit_key),
                    (AuthType::Admin, self.hmac_admin_key),
                ]
                .into(),
            },
            timings: Timings {
                installing: self.installing_after,
                booting: self.booting_after,
                phoned_home: self.phoned_home_after,
                ip_release: self.ip_release_after,
                reclaim: self.reclaim_after,
            },
            rate_limit: self.max_requests_per_minute,
        }
    }
}
