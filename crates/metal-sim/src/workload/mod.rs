//! The machines' side of the local stand-in for metal-stack: what a machine does once it phoned
//! home with kubeadm bootstrap data. Like the simulator it is never part of the provider.
//!
//! - The first control-plane machine (`kubeadm init`) starts the workload cluster: a real etcd
//!   and kube-apiserver with the certificates the kubeadm control-plane provider generated (read
//!   from the machine's bootstrap files), the API server on the control-plane IP that the
//!   machine's kube-vip static pod announces, and kubeadm's uploaded configuration.
//! - Joining machines (`kubeadm join`) register once their bootstrap token authenticates at the
//!   cluster's endpoint and the CA matches their pin.
//! - Every registered machine gets its Node (and control-plane machines their mirror pods), see
//!   [`nodes`]; a freed machine's Node goes away, and the cluster's processes stop when its last
//!   control-plane machine is freed.
//!
//! What it does not play: the operating system, kubelet and containers (no pod runs), etcd
//! membership of joining control-plane machines (one etcd serves the cluster), kube-proxy and
//! CoreDNS (kubeadm's add-ons).

pub mod bootstrap;
pub mod control_plane;
pub mod member;
pub mod nodes;
mod objects;
pub mod pki;
mod vip;

use super::Sim;
use bootstrap::{Files, Init, Join, Role};
use control_plane::{ControlPlane, InitMachine, JoinMachine};
use member::Binaries;
use metal_api::ProviderId;
use nodes::WantedNode;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

/// Where the stand-in finds its binaries, keeps the clusters' data, and how often it looks.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub binaries: Binaries,
    pub dir: PathBuf,
    pub period: Duration,
}

/// One allocated machine that phoned home, as the stand-in sees it.
#[derive(Debug, Clone)]
struct Booted {
    allocation: String,
    cluster: String,
    hostname: String,
    provider_id: String,
    address: Option<String>,
    user_data: String,
    /// Its kubelet runs: not rebooting, powered off or hung.
    ready: bool,
    boot_id: String,
}

/// A machine's bootstrap data, read once per allocation.
struct Parsed {
    files: Files,
    role: Option<Role>,
}

/// A workload cluster the stand-in runs.
struct Workload {
    plane: ControlPlane,
    version: String,
    uploaded: bool,
}

/// The stand-in's state across looks.
pub struct Agent {
    sim: Sim,
    config: AgentConfig,
    parsed: BTreeMap<String, Option<Parsed>>,
    clusters: BTreeMap<String, Workload>,
    joined: BTreeSet<String>,
    said: BTreeSet<String>,
}

impl Agent {
    pub fn new(sim: Sim, config: AgentConfig) -> Agent {
        Agent {
            sim,
            config,
            parsed: BTreeMap::new(),
            clusters: BTreeMap::new(),
            joined: BTreeSet::new(),
            said: BTreeSet::new(),
        }
    }

    /// Looks every `period` until the task is aborted; dropping the task stops every cluster.
    pub fn spawn(sim: Sim, config: AgentConfig) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut agent = Agent::new(sim, config);
            loop {
                agent.look().await;
                tokio::time::sleep(agent.config.period).await;
            }
        })
    }

    /// The kubeconfig of the administrator of the workload cluster of `cluster_id`
    /// (`<namespace>.<name>`), once it runs.
    pub fn kubeconfig_path(dir: &std::path::Path, cluster_id: &str) -> PathBuf {
        dir.join(cluster_id).join("admin.conf")
    }

    /// One look: reads new bootstrap data, starts and stops clusters, syncs Nodes.
    pub async fn look(&mut self) {
        let machines = booted(&self.sim);
        let live: BTreeSet<&str> = machines.iter().map(|m| m.allocation.as_str()).collect();
        self.parsed.retain(|a, _| live.contains(a.as_str()));
        self.joined.retain(|a| live.contains(a.as_str()));
        for m in &machines {
            if !self.parsed.contains_key(&m.allocation) {
                let parsed = self.parse(m);
                self.parsed.insert(m.allocation.clone(), parsed);
            }
        }
        let mut by_cluster: BTreeMap<String, Vec<Booted>> = BTreeMap::new();
        for m in machines {
            by_cluster.entry(m.cluster.clone()).or_default().push(m);
        }
        self.stop_headless(&by_cluster);
        for (cluster, members) in &by_cluster {
            self.tend(cluster, members).await;
        }
    }

    fn parse(&mut self, m: &Booted) -> Option<Parsed> {
        let read = bootstrap::files(&m.user_data)
            .and_then(|files| bootstrap::role(&files).map(|role| Parsed { files, role }));
        match read {
            Ok(parsed) => Some(parsed),
            Err(error) => {
                tracing::warn!(machine = %m.hostname, %error, "bootstrap data not runnable; the machine stays without a node");
                None
            }
        }
    }

    fn role(&self, m: &Booted) -> Option<&Role> {
        self.parsed.get(&m.allocation)?.as_ref()?.role.as_ref()
    }

    /// Stops the clusters none of whose control-plane machines is allocated any more.
    fn stop_headless(&mut self, by_cluster: &BTreeMap<String, Vec<Booted>>) {
        let headed: BTreeSet<String> = by_cluster
            .iter()
            .filter(|(_, ms)| {
                ms.iter().any(|m| {
                    matches!(
                        self.role(m),
                        Some(Role::Init(_) | Role::JoinControlPlane(_))
                    )
                })
            })
            .map(|(c, _)| c.clone())
            .collect();
        let gone: Vec<String> = self
            .clusters
            .keys()
            .filter(|c| !headed.contains(*c))
            .cloned()
            .collect();
        for cluster in gone {
            self.clusters.remove(&cluster);
            let dir = self.config.dir.join(&cluster);
            let _ = std::fs::remove_dir_all(&dir);
            tracing::info!(%cluster, "last control-plane machine freed: workload cluster stopped");
        }
    }

    /// Starts the cluster when its init machine is up, then registers its machines.
    async fn tend(&mut self, cluster: &str, members: &[Booted]) {
        if !self.clusters.contains_key(cluster) {
            self.start(cluster, members).await;
        }
        let init = self.init_of(members);
        let Some(workload) = self.clusters.get_mut(cluster) else {
            return;
        };
        if !workload.uploaded {
            let client = workload.plane.client.clone();
            if let Some(init) = init {
                match objects::upload(
                    &client,
                    &init,
                    &workload.plane.endpoint,
                    &workload.plane.ca_pem,
                )
                .await
                {
                    Ok(()) => workload.uploaded = true,
                    Err(error) => {
                        tracing::warn!(%cluster, %error, "uploading kubeadm's configuration")
                    }
                }
            }
        }
        self.leave_freed(cluster, members);
        let wanted = self.wanted(cluster, members).await;
        if let Some(workload) = self.clusters.get(cluster)
            && let Err(error) = nodes::sync(&workload.plane.client, &wanted).await
        {
            tracing::warn!(%cluster, %error, "node agent");
        }
    }

    fn init_of(&self, members: &[Booted]) -> Option<Init> {
        members.iter().find_map(|m| match self.role(m) {
            Some(Role::Init(init)) => Some(init.clone()),
            _ => None,
        })
    }

    async fn start(&mut self, cluster: &str, members: &[Booted]) {
        let Some((m, init)) = members.iter().find_map(|m| match self.role(m) {
            Some(Role::Init(init)) => Some((m, init.clone())),
            _ => None,
        }) else {
            return;
        };
        let Some(files) = self
            .parsed
            .get(&m.allocation)
            .and_then(Option::as_ref)
            .map(|p| p.files.clone())
        else {
            return;
        };
        let Some(vip) = bootstrap::kube_vip(&files) else {
            self.say_once(
                &m.allocation,
                format!("{}: no kube-vip static pod announces the control-plane endpoint {}; the API server stays unreachable", m.hostname, init.endpoint),
            );
            return;
        };
        let Some(address) = m.address.as_deref().and_then(|a| a.parse().ok()) else {
            self.say_once(
                &m.allocation,
                format!("{}: no address in a private network", m.hostname),
            );
            return;
        };
        let dir = self.config.dir.join(cluster);
        let machine = InitMachine {
            files: &files,
            init: &init,
            vip: &vip,
            address,
            node_name: &m.hostname,
        };
        tracing::info!(%cluster, machine = %m.hostname, endpoint = %vip, "kubeadm init: starting etcd and kube-apiserver");
        match ControlPlane::init(&self.config.binaries, &dir, &machine).await {
            Ok(plane) => {
                let workload = Workload {
                    plane,
                    version: init.version.clone(),
                    uploaded: false,
                };
                self.clusters.insert(cluster.to_owned(), workload);
            }
            Err(error) => self.say_once(
                &m.allocation,
                format!("{}: kubeadm init failed: {error}", m.hostname),
            ),
        }
    }

    /// The Nodes of the cluster's registered machines: the init machine at once, joining ones
    /// once their token authenticates.
    async fn wanted(&mut self, cluster: &str, members: &[Booted]) -> BTreeMap<String, WantedNode> {
        let mut wanted = BTreeMap::new();
        if let Some(workload) = self.clusters.get_mut(cluster)
            && let Some(version) = objects::kubernetes_version(&workload.plane.client).await
        {
            workload.version = version;
        }
        for m in members {
            let (control_plane, join) = match self.role(m) {
                Some(Role::Init(_)) => (true, None),
                Some(Role::JoinControlPlane(join)) => (true, Some(join.clone())),
                Some(Role::JoinWorker(join)) => (false, Some(join.clone())),
                None => continue,
            };
            let joins_control_plane = control_plane && join.is_some();
            if let Some(join) = join
                && !self.joined.contains(&m.allocation)
            {
                let Some(workload) = self.clusters.get(cluster) else {
                    continue;
                };
                match authenticate(&workload.plane, &join).await {
                    Ok(()) => {
                        tracing::info!(%cluster, machine = %m.hostname, "kubeadm join: token accepted");
                        self.joined.insert(m.allocation.clone());
                    }
                    Err(reason) => {
                        self.say_once(
                            &m.allocation,
                            format!("{}: kubeadm join waits: {reason}", m.hostname),
                        );
                        continue;
                    }
                }
            }
            if joins_control_plane && !self.ensure_member(cluster, m).await {
                continue;
            }
            let version = self.clusters.get(cluster).map(|w| w.version.clone());
            wanted.insert(
                m.hostname.clone(),
                WantedNode {
                    provider_id: m.provider_id.clone(),
                    address: m.address.clone(),
                    control_plane,
                    version,
                    ready: m.ready,
                    boot_id: m.boot_id.clone(),
                },
            );
        }
        wanted
    }

    /// Makes a joining control-plane machine a member of the cluster's control plane.
    async fn ensure_member(&mut self, cluster: &str, m: &Booted) -> bool {
        let files = self
            .parsed
            .get(&m.allocation)
            .and_then(Option::as_ref)
            .map(|p| p.files.clone());
        let (Some(files), Some(address)) =
            (files, m.address.as_deref().and_then(|a| a.parse().ok()))
        else {
            return false;
        };
        let Some(workload) = self.clusters.get_mut(cluster) else {
            return false;
        };
        if workload.plane.is_member(&m.hostname) {
            return true;
        }
        let machine = JoinMachine {
            files: &files,
            address,
            node_name: &m.hostname,
        };
        tracing::info!(%cluster, machine = %m.hostname, "kubeadm join --control-plane: adding an etcd member, starting kube-apiserver");
        match workload.plane.join(&self.config.binaries, &machine).await {
            Ok(()) => true,
            Err(error) => {
                self.say_once(
                    &m.allocation,
                    format!(
                        "{}: kubeadm join --control-plane failed: {error}",
                        m.hostname
                    ),
                );
                false
            }
        }
    }

    /// Stops the members whose machines were freed and routes the control-plane IP to the
    /// healthy rest.
    fn leave_freed(&mut self, cluster: &str, members: &[Booted]) {
        let present: BTreeSet<&str> = members.iter().map(|m| m.hostname.as_str()).collect();
        if let Some(workload) = self.clusters.get_mut(cluster) {
            for node in workload.plane.member_nodes() {
                if !present.contains(node.as_str()) {
                    tracing::info!(%cluster, %node, "control-plane machine freed: its etcd and kube-apiserver stop");
                    workload.plane.leave(&node);
                }
            }
            workload.plane.route();
        }
    }

    fn say_once(&mut self, key: &str, message: String) {
        if self.said.insert(format!("{key}: {message}")) {
            tracing::warn!("{message}");
        }
    }
}

/// What `kubeadm join`'s discovery checks: the endpoint is the cluster's, the CA matches a pin,
/// and the bootstrap token authenticates there.
async fn authenticate(plane: &ControlPlane, join: &Join) -> Result<(), String> {
    if join.endpoint != plane.endpoint {
        return Err(format!(
            "discovery endpoint {} is not the cluster's control-plane endpoint {}",
            join.endpoint, plane.endpoint
        ));
    }
    let pin = pki::ca_cert_hash(plane.ca_pem.as_bytes());
    if !join.ca_cert_hashes.is_empty() && !pin.is_some_and(|p| join.ca_cert_hashes.contains(&p)) {
        return Err("no caCertHashes entry pins the cluster's CA".into());
    }
    let ca = reqwest::Certificate::from_pem(plane.ca_pem.as_bytes()).map_err(|e| e.to_string())?;
    let client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    let status = client
        .get(format!("https://{}/api", plane.endpoint))
        .bearer_auth(&join.token)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!(
            "the API server answers {status} to the bootstrap token"
        ))
    }
}

/// The allocated machines that phoned home in their allocation, with their cluster tag.
fn booted(sim: &Sim) -> Vec<Booted> {
    let state = sim.state();
    state
        .machines
        .values()
        .filter_map(|m| {
            let allocation = nodes::booted_allocation(m)?;
            let cluster = m.cluster_id()?;
            Some(Booted {
                allocation: allocation.allocationuuid.clone(),
                cluster: cluster.to_owned(),
                hostname: allocation.hostname.clone(),
                provider_id: ProviderId::format(&m.partition, &m.id),
                address: nodes::private_address(allocation),
                user_data: allocation.user_data.clone(),
                ready: state.kubelet_running(m),
                boot_id: nodes::boot_id(&m.id, m.power.generation),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
