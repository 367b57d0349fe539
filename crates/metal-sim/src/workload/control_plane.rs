//! A workload cluster's control plane as its machines run it: `kubeadm init` starts the first
//! member (etcd and kube-apiserver), `kubeadm join --control-plane` adds a member to etcd and
//! starts its own, and kube-vip makes the control-plane IP lead to their API servers.

use super::bootstrap::{Files, HostPort, Init};
use super::member::{Binaries, Member, MemberSpec, StartError, client_leaf};
use super::vip::Vip;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// A workload cluster's running control plane; dropping it stops every member.
pub struct ControlPlane {
    pub endpoint: HostPort,
    /// The administrator's kubeconfig (`admin.conf`), at the control-plane IP.
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    pub ca_pem: String,
    service_subnet: String,
    dir: PathBuf,
    vip: Vip,
    members: BTreeMap<String, Member>,
}

/// The machine that runs `kubeadm init`.
pub struct InitMachine<'a> {
    pub files: &'a Files,
    pub init: &'a Init,
    /// Where kube-vip announces the control-plane IP.
    pub vip: &'a HostPort,
    pub address: IpAddr,
    pub node_name: &'a str,
}

/// A machine that runs `kubeadm join --control-plane`.
pub struct JoinMachine<'a> {
    pub files: &'a Files,
    pub address: IpAddr,
    pub node_name: &'a str,
}

impl ControlPlane {
    /// Starts the first member in `dir/<node>`, announces the control-plane IP and writes
    /// `dir/admin.conf`.
    pub async fn init(
        bins: &Binaries,
        dir: &Path,
        machine: &InitMachine<'_>,
    ) -> Result<ControlPlane, StartError> {
        let spec = MemberSpec {
            files: machine.files,
            node_name: machine.node_name,
            address: machine.address,
            endpoint: machine.vip,
            service_subnet: &machine.init.service_subnet,
            etcd_cluster: None,
        };
        let member_dir = dir.join(machine.node_name);
        let member = Member::start(bins, &member_dir, &spec).await?;
        member.wait_ready(&member_dir).await?;
        let vip_ip: IpAddr = machine
            .vip
            .host
            .parse()
            .map_err(|_| StartError::NotLoopback {
                what: "control-plane endpoint",
                address: machine.vip.host.clone(),
            })?;
        let io = |operation| {
            let dir = dir.display().to_string();
            move |source| StartError::Io {
                operation,
                dir,
                source,
            }
        };
        let vip = Vip::announce(SocketAddr::new(vip_ip, machine.vip.port))
            .await
            .map_err(io("announcing the control-plane IP"))?;
        vip.route_to(vec![member.apiserver]);
        let admin = member
            .ca
            .issue(&client_leaf("kubernetes-admin", "system:masters"))?;
        let text = kubeconfig(&machine.vip.to_string(), &member.ca.cert_pem, &admin);
        let kubeconfig = dir.join("admin.conf");
        std::fs::write(&kubeconfig, &text).map_err(io("writing admin.conf"))?;
        Ok(ControlPlane {
            endpoint: machine.vip.clone(),
            kubeconfig,
            client: admin_client(&text).await?,
            ca_pem: member.ca.cert_pem.clone(),
            service_subnet: machine.init.service_subnet.clone(),
            dir: dir.to_path_buf(),
            vip,
            members: BTreeMap::from([(machine.node_name.to_owned(), member)]),
        })
    }

    /// Adds the machine's etcd member through a running member, starts its processes and routes
    /// the control-plane IP to its API server too.
    pub async fn join(
        &mut self,
        bins: &Binaries,
        machine: &JoinMachine<'_>,
    ) -> Result<(), StartError> {
        let peer = format!("https://{}:2380", machine.address);
        let mut cluster = None;
        let mut last = None;
        for member in self.members.values() {
            match member.add_etcd_member(machine.node_name, &peer).await {
                Ok(c) => {
                    cluster = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(cluster) = cluster else {
            return Err(last.unwrap_or(StartError::EtcdJoin {
                peer,
                reason: "no member runs".into(),
            }));
        };
        let spec = MemberSpec {
            files: machine.files,
            node_name: machine.node_name,
            address: machine.address,
            endpoint: &self.endpoint,
            service_subnet: &self.service_subnet,
            etcd_cluster: Some(cluster),
        };
        let member_dir = self.dir.join(machine.node_name);
        let member = Member::start(bins, &member_dir, &spec).await?;
        member.wait_ready(&member_dir).await?;
        self.members.insert(machine.node_name.to_owned(), member);
        self.route();
        Ok(())
    }

    /// Stops the member on `node` (its machine was freed).
    pub fn leave(&mut self, node: &str) {
        if self.members.remove(node).is_some() {
            let _ = std::fs::remove_dir_all(self.dir.join(node));
            self.route();
        }
    }

    pub fn is_member(&self, node: &str) -> bool {
        self.members.contains_key(node)
    }

    pub fn member_nodes(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    /// Leads the control-plane IP to the members whose etcd runs, as a health-checked load
    /// balancer in front of the API servers would; connections to the others are cut.
    pub fn route(&mut self) {
        let healthy = self
            .members
            .values_mut()
            .filter_map(|m| m.etcd_running().then_some(m.apiserver))
            .collect();
        self.vip.route_to(healthy);
    }
}

fn kubeconfig(server: &str, ca_pem: &str, user: &super::pki::Issued) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "workload", "cluster": {
            "server": format!("https://{server}"),
            "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": "kubernetes-admin", "user": {
            "client-certificate-data": b64(&user.cert_pem),
            "client-key-data": b64(&user.key_pem)}}],
        "contexts": [{"name": "admin", "context": {"cluster": "workload", "user": "kubernetes-admin"}}],
        "current-context": "admin",
    })
    .to_string()
}

async fn admin_client(kubeconfig: &str) -> Result<kube::Client, StartError> {
    let parsed: Kubeconfig =
        serde_json::from_str(kubeconfig).map_err(|e| StartError::Kubeconfig(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| StartError::Kubeconfig(e.to_string()))?;
    // The agent makes short requests only; a member that hangs must not stall its loop.
    config.read_timeout = Some(std::time::Duration::from_secs(15));
    kube::Client::try_from(config).map_err(|e| StartError::Kubeconfig(e.to_string()))
}
