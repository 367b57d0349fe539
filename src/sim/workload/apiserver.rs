//! What `kubeadm init` starts on the first control-plane machine, as real processes: etcd and
//! kube-apiserver with the cluster's certificates, the API server on the control-plane endpoint
//! that kube-vip announces. Everything listens on loopback addresses only.

use super::bootstrap::{Files, HostPort, Init, PKI};
use super::pki::{Ca, Leaf, PkiError};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::{Child, Command};

/// Why a workload control plane could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Pki(#[from] PkiError),
    #[error("bootstrap file {0} is missing")]
    MissingFile(String),
    #[error(
        "{what} {address} is not a loopback address; the node stand-in listens on 127.0.0.0/8 only"
    )]
    NotLoopback { what: &'static str, address: String },
    #[error("{operation} in {dir}: {source}")]
    Io {
        operation: &'static str,
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("admin kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("the API server at {endpoint} did not answer within {seconds} s (logs in {dir})")]
    NotReady {
        endpoint: String,
        seconds: u64,
        dir: String,
    },
}

/// Where the real binaries are and where a cluster's data goes.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
}

/// A workload cluster's running etcd and kube-apiserver; dropping it stops both.
pub struct ControlPlane {
    pub endpoint: HostPort,
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    pub ca_pem: String,
    /// Signs the Node-facing certificates later machines would get (kept for joins).
    pub ca: Ca,
    _etcd: Child,
    _apiserver: Child,
}

/// The inputs of one `kubeadm init`.
pub struct InitMachine<'a> {
    pub files: &'a Files,
    pub init: &'a Init,
    /// Where kube-vip announces the control-plane IP (the API server binds there).
    pub vip: &'a HostPort,
    /// The machine's own address (etcd listens there).
    pub address: IpAddr,
    pub node_name: &'a str,
}

impl ControlPlane {
    /// Writes the certificates and starts etcd and kube-apiserver in `dir`, waiting until the API
    /// server answers.
    pub async fn start(
        bins: &Binaries,
        dir: &Path,
        machine: &InitMachine<'_>,
    ) -> Result<ControlPlane, StartError> {
        let vip: IpAddr = machine
            .vip
            .host
            .parse()
            .ok()
            .filter(|ip: &IpAddr| ip.is_loopback())
            .ok_or_else(|| StartError::NotLoopback {
                what: "control-plane endpoint",
                address: machine.vip.host.clone(),
            })?;
        if !machine.address.is_loopback() {
            return Err(StartError::NotLoopback {
                what: "machine address",
                address: machine.address.to_string(),
            });
        }
        let pki = dir.join("pki");
        let io = |operation| {
            let dir = dir.display().to_string();
            move |source| StartError::Io {
                operation,
                dir,
                source,
            }
        };
        std::fs::create_dir_all(pki.join("etcd")).map_err(io("creating the pki directory"))?;
        let certs = write_certificates(&pki, machine, vip)?;
        let etcd = start_etcd(bins, dir, machine).map_err(io("starting etcd"))?;
        let apiserver =
            start_apiserver(bins, dir, machine, vip).map_err(io("starting kube-apiserver"))?;
        let kubeconfig = dir.join("admin.conf");
        std::fs::write(&kubeconfig, &certs.admin_kubeconfig).map_err(io("writing admin.conf"))?;
        let client = admin_client(&certs.admin_kubeconfig).await?;
        let plane = ControlPlane {
            endpoint: machine.vip.clone(),
            kubeconfig,
            client,
            ca_pem: certs.ca.cert_pem.clone(),
            ca: certs.ca,
            _etcd: etcd,
            _apiserver: apiserver,
        };
        plane.wait_ready(dir).await?;
        Ok(plane)
    }

    async fn wait_ready(&self, dir: &Path) -> Result<(), StartError> {
        const SECONDS: u64 = 60;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(SECONDS);
        let address = self.endpoint.to_string();
        // A closed port first, so that the client does not log every refused connection.
        while tokio::net::TcpStream::connect(&address).await.is_err()
            || self.client.apiserver_version().await.is_err()
        {
            if tokio::time::Instant::now() > deadline {
                return Err(StartError::NotReady {
                    endpoint: self.endpoint.to_string(),
                    seconds: SECONDS,
                    dir: dir.display().to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }
}

struct Certificates {
    ca: Ca,
    admin_kubeconfig: String,
}

fn file<'a>(files: &'a Files, name: &str) -> Result<&'a [u8], StartError> {
    let path = format!("{PKI}{name}");
    files
        .0
        .get(&path)
        .map(Vec::as_slice)
        .ok_or(StartError::MissingFile(path))
}

/// Copies the CAs and service-account keys kubeadm was given and issues what `kubeadm init`
/// issues: the API server's serving certificate, etcd's, the API server's etcd and kubelet
/// clients, and the administrator's (for `admin.conf`).
fn write_certificates(
    pki: &Path,
    machine: &InitMachine<'_>,
    vip: IpAddr,
) -> Result<Certificates, StartError> {
    let files = machine.files;
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(pki.join(name), bytes).map_err(|source| StartError::Io {
            operation: "writing a certificate",
            dir: pki.display().to_string(),
            source,
        })
    };
    for name in ["ca.crt", "etcd/ca.crt", "sa.pub", "sa.key"] {
        write(name, file(files, name)?)?;
    }
    let ca = Ca::load("ca", file(files, "ca.crt")?, file(files, "ca.key")?)?;
    let etcd_ca = Ca::load(
        "etcd/ca",
        file(files, "etcd/ca.crt")?,
        file(files, "etcd/ca.key")?,
    )?;
    let service_ip = first_service_ip(&machine.init.service_subnet);
    let mut ips = vec![vip, machine.address];
    ips.extend(service_ip);
    let apiserver_dns = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        machine.node_name,
    ];
    let issued = [
        (
            "apiserver",
            ca.issue(&Leaf {
                common_name: "kube-apiserver",
                organization: None,
                dns: &apiserver_dns,
                ips: &ips,
                server: true,
                client: false,
            })?,
        ),
        (
            "apiserver-kubelet-client",
            ca.issue(&client_leaf(
                "kube-apiserver-kubelet-client",
                "kubeadm:cluster-admins",
            ))?,
        ),
        (
            "etcd/server",
            etcd_ca.issue(&Leaf {
                common_name: machine.node_name,
                organization: None,
                dns: &["localhost", machine.node_name],
                ips: &[machine.address],
                server: true,
                client: true,
            })?,
        ),
        (
            "apiserver-etcd-client",
            etcd_ca.issue(&client_leaf("kube-apiserver-etcd-client", "system:masters"))?,
        ),
    ];
    for (name, cert) in &issued {
        write(&format!("{name}.crt"), cert.cert_pem.as_bytes())?;
        write(&format!("{name}.key"), cert.key_pem.as_bytes())?;
    }
    let admin = ca.issue(&client_leaf("kubernetes-admin", "system:masters"))?;
    let admin_kubeconfig = kubeconfig(&machine.vip.to_string(), &ca.cert_pem, &admin);
    Ok(Certificates {
        ca,
        admin_kubeconfig,
    })
}

fn client_leaf<'a>(common_name: &'a str, organization: &'a str) -> Leaf<'a> {
    Leaf {
        common_name,
        organization: Some(organization),
        dns: &[],
        ips: &[],
        server: false,
        client: true,
    }
}

/// The first address of the service subnet: the `kubernetes` Service's ClusterIP.
fn first_service_ip(subnet: &str) -> Option<IpAddr> {
    let base: std::net::Ipv4Addr = subnet.split('/').next()?.parse().ok()?;
    Some(IpAddr::V4(std::net::Ipv4Addr::from(u32::from(base) + 1)))
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
    let config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| StartError::Kubeconfig(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| StartError::Kubeconfig(e.to_string()))
}

fn log_file(dir: &Path, name: &str) -> std::io::Result<std::fs::File> {
    std::fs::File::create(dir.join(format!("{name}.log")))
}

fn spawn(program: &Path, args: &[String], dir: &Path, name: &str) -> std::io::Result<Child> {
    let log = log_file(dir, name)?;
    Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
}

fn start_etcd(bins: &Binaries, dir: &Path, machine: &InitMachine<'_>) -> std::io::Result<Child> {
    let pki = dir.join("pki");
    let ip = machine.address;
    let p = |f: &str| pki.join(f).display().to_string();
    let args = vec![
        format!("--name={}", machine.node_name),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls=https://{ip}:2379"),
        format!("--advertise-client-urls=https://{ip}:2379"),
        format!("--listen-peer-urls=https://{ip}:2380"),
        format!("--initial-advertise-peer-urls=https://{ip}:2380"),
        format!("--initial-cluster={}=https://{ip}:2380", machine.node_name),
        format!("--listen-metrics-urls=http://{ip}:2381"),
        format!("--cert-file={}", p("etcd/server.crt")),
        format!("--key-file={}", p("etcd/server.key")),
        format!("--trusted-ca-file={}", p("etcd/ca.crt")),
        "--client-cert-auth=true".into(),
        format!("--peer-cert-file={}", p("etcd/server.crt")),
        format!("--peer-key-file={}", p("etcd/server.key")),
        format!("--peer-trusted-ca-file={}", p("etcd/ca.crt")),
        "--peer-client-cert-auth=true".into(),
        "--unsafe-no-fsync".into(),
        "--log-level=warn".into(),
    ];
    spawn(&bins.etcd, &args, dir, "etcd")
}

fn start_apiserver(
    bins: &Binaries,
    dir: &Path,
    machine: &InitMachine<'_>,
    vip: IpAddr,
) -> std::io::Result<Child> {
    let pki = dir.join("pki");
    let p = |f: &str| pki.join(f).display().to_string();
    let args = vec![
        format!("--etcd-servers=https://{}:2379", machine.address),
        format!("--etcd-cafile={}", p("etcd/ca.crt")),
        format!("--etcd-certfile={}", p("apiserver-etcd-client.crt")),
        format!("--etcd-keyfile={}", p("apiserver-etcd-client.key")),
        format!("--bind-address={vip}"),
        format!("--secure-port={}", machine.vip.port),
        format!("--advertise-address={}", machine.address),
        "--endpoint-reconciler-type=none".into(),
        format!("--cert-dir={}", pki.display()),
        format!("--tls-cert-file={}", p("apiserver.crt")),
        format!("--tls-private-key-file={}", p("apiserver.key")),
        format!("--client-ca-file={}", p("ca.crt")),
        format!(
            "--kubelet-client-certificate={}",
            p("apiserver-kubelet-client.crt")
        ),
        format!("--kubelet-client-key={}", p("apiserver-kubelet-client.key")),
        "--kubelet-preferred-address-types=InternalIP".into(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", p("sa.pub")),
        format!("--service-account-signing-key-file={}", p("sa.key")),
        format!("--service-cluster-ip-range={}", machine.init.service_subnet),
        "--authorization-mode=Node,RBAC".into(),
        "--enable-bootstrap-token-auth=true".into(),
        "--allow-privileged=true".into(),
        // No kube-controller-manager runs in the stand-in, so nothing creates service accounts.
        "--disable-admission-plugins=ServiceAccount".into(),
    ];
    spawn(&bins.kube_apiserver, &args, dir, "kube-apiserver")
}
