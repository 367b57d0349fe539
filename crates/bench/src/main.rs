//! `make bench`: provisioning at scale, measured. Starts the real control plane, Cluster API
//! core, the simulator (in this process, with a generated inventory) and `capms manager` (the
//! build cargo made for this run: release under `make bench`), applies K clusters × M workers,
//! and reports latencies, metal-api and apiserver calls, reconciles, admission, capms's CPU and
//! memory and deletion time as JSON, a table and a ready-over-time SVG. Then it loads the
//! webhook server with AdmissionReviews at a fixed rate. First, the same workload runs with
//! Cluster API alone (no provider): its pace and the apiserver's load are the baseline the
//! provider run is compared with.
//!
//! Without arguments it runs once at a tiny size (`make test` runs it so, so that it cannot rot).
//! The report judges each target capms is held to (`targets.rs`) and the run exits 1 when one
//! stated for its size is missed; at the tiny size only the size-free ones are judged.

// A benchmark (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support as support;

mod admission;
mod alone;
mod apiserver_load;
mod audit;
mod capi_log;
mod ideal;
mod kubelets;
mod measure;
mod report;
mod scenario;
mod table;
mod targets;
mod v2_tokens;
mod watch;

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

/// Sizes and knobs of one run.
#[derive(Parser, Debug, Clone)]
#[command(name = "bench", about = "capms provisioning and admission benchmark")]
pub struct Args {
    /// Workload clusters, each with a firewall and a MachineDeployment.
    #[arg(long, default_value_t = 1)]
    clusters: usize,
    /// Workers per cluster.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Machines in the simulator's inventory (default: exactly what the clusters need).
    #[arg(long)]
    machines: Option<usize>,
    /// Seconds per machine lifecycle step (Installing, Booting, Phoned Home).
    #[arg(long, default_value_t = 1.0)]
    step: f64,
    /// How long ready clusters are watched for idle metal-api calls, in seconds.
    #[arg(long, default_value_t = 5)]
    idle: u64,
    /// AdmissionReviews per second in the admission benchmark.
    #[arg(long, default_value_t = 50)]
    admission_rate: u32,
    /// Seconds of admission load.
    #[arg(long, default_value_t = 2)]
    admission_seconds: u64,
    /// Further `capms manager` flags, e.g. `--capms-arg=--concurrency=30`.
    #[arg(long = "capms-arg", allow_hyphen_values = true)]
    capms_args: Vec<String>,
    /// Leave the clusters without a kubeconfig Secret. By default each cluster's points at the
    /// management cluster's API server, standing in for the workload cluster's API as when
    /// workers join a running cluster; without one Cluster API fails to connect for every
    /// provisioned Machine and retries about once a second.
    #[arg(long)]
    no_workload_api: bool,
    /// Register each machine's Node once it phones home, as its kubelet would (the simulator's
    /// node agent, once a second), in the API server the kubeconfig Secrets point at: Cluster
    /// API then finds the Node of each provisioned Machine, sets its nodeRef and the Machine
    /// reaches Running. Without it no Node appears and Cluster API keeps looking for one.
    #[arg(long, conflicts_with = "no_workload_api")]
    nodes: bool,
    /// capms's `RUST_LOG` (its log is `work/capms.log` under `--out`), e.g.
    /// `info,capms=debug,kube_client=debug` to see every step and apiserver request.
    #[arg(long, default_value = "info")]
    log: String,
    /// Skip the baseline: the same workload with Cluster API alone, run first, that Cluster
    /// API's pace and the apiserver's load with capms are compared with.
    #[arg(long)]
    no_baseline: bool,
    /// After the baseline, the same workload with a provider that takes no time, started when
    /// each MetalStackMachine is owned or once its MachineSet reported every replica: the
    /// soonest any provider could reach all ready on this apiserver.
    #[arg(long, value_enum, conflicts_with = "no_baseline")]
    ideal: Option<apiserver_load::IdealStart>,
    /// Where the report (report.json, report.txt, ready.svg) goes.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// How long provisioning or deletion may take before the run fails, in seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// What the clusters reach metal-stack through: metal-api (v1) with capms's own HMAC key,
    /// or metal-apiserver (v2) with a project token of each cluster's own in its credentials
    /// Secret, under the simulator's rate limit per token (metal-apiserver's default, 100 a
    /// minute).
    #[arg(long, value_enum, default_value_t = Api::V1)]
    api: Api,
    /// With `--api v2`: each cluster's token lives this many seconds (metal-apiserver's
    /// shortest is 600; the simulator mints shorter ones), so that capms refreshes it while the
    /// run goes on. The report says how many Secrets ended on a refreshed token, and the run
    /// misses its targets unless all did and no call was refused as unauthenticated.
    #[arg(long)]
    token_lifetime: Option<u64>,
}

/// The API the clusters reach metal-stack through.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    V1,
    V2,
}

impl Args {
    fn lifecycle_step(&self) -> Duration {
        Duration::from_secs_f64(self.step)
    }

    /// The machines the clusters need: each worker plus each cluster's firewall.
    fn needed_machines(&self) -> usize {
        self.clusters * (self.workers + 1)
    }

    /// Refuses sizes the simulated partition cannot hold, before anything starts.
    fn check(&self) -> Result<(), String> {
        let machines = self.machines.unwrap_or_else(|| self.needed_machines());
        if self.clusters == 0 || self.workers == 0 {
            return Err("--clusters and --workers: at least 1 each".into());
        }
        if self.clusters > scenario::MAX_CLUSTERS {
            return Err(format!(
                "--clusters {}: the simulated partition's private super network holds {} cluster networks; valid: 1..={}",
                self.clusters,
                scenario::MAX_CLUSTERS,
                scenario::MAX_CLUSTERS
            ));
        }
        if machines < self.needed_machines() {
            return Err(format!(
                "--machines {machines}: {} clusters × ({} workers + 1 firewall) need {} machines; valid: {} or more",
                self.clusters,
                self.workers,
                self.needed_machines(),
                self.needed_machines()
            ));
        }
        if !(0.0..=60.0).contains(&self.step) {
            return Err(format!("--step {}: valid: 0 to 60 seconds", self.step));
        }
        if self.admission_rate == 0 || self.admission_seconds == 0 {
            return Err("--admission-rate and --admission-seconds: at least 1 each".into());
        }
        match self.token_lifetime {
            Some(_) if self.api != Api::V2 => Err(
                "--token-lifetime: only clusters on API v2 have tokens; valid with --api v2".into(),
            ),
            Some(seconds) if seconds < 10 => Err(format!(
                "--token-lifetime {seconds}: valid: 10 seconds or more"
            )),
            _ => Ok(()),
        }
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = args.check() {
        eprintln!("bench: {e}");
        std::process::exit(2);
    }
    // What the simulator, running in this process, warns about (a node agent's failed sync).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let report = runtime.block_on(async {
        let alone = match args.no_baseline {
            true => None,
            false => {
                let mut alone = alone::run(&args).await;
                if let Some(start) = args.ideal {
                    alone.ideal = Some(ideal::run(&args, start).await);
                }
                Some(alone)
            }
        };
        scenario::run(&args, alone).await
    });
    std::fs::create_dir_all(&args.out).expect("output directory");
    let judged = targets::Judged {
        targets: targets::judge(&report),
        report: &report,
    };
    let mut table = report.table();
    targets::write(&mut table, &judged.targets);
    print!("{table}");
    report::write(&report, &judged, &args.out, &table);
    println!("bench: report in {}", args.out.display());
    let missed = targets::missed(&judged.targets);
    if !missed.is_empty() {
        eprintln!(
            "bench: {} target(s) missed: {}",
            missed.len(),
            missed.join("; ")
        );
        std::process::exit(1);
    }
}
