//! One control-plane machine's processes, as kubeadm leaves them: etcd and kube-apiserver on the
//! machine's address with certificates issued from the cluster's CAs (read from the machine's
//! bootstrap files), and the kubelet's port-forward API on port 10250. Everything listens on the
//! machine's loopback address only.

use super::bootstrap::{Files, HostPort, PKI};
use super::pki::{Ca, Issued, Leaf, PkiError};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::{Child, Command};

/// Why a control-plane member could not be started.
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
    #[error("adding the etcd member at {peer}: {reason}")]
    EtcdJoin { peer: String, reason: String },
    #[error("{what} at {address} did not answer within {seconds} s (logs in {dir})")]
    NotReady {
        what: &'static str,
        address: String,
        seconds: u64,
        dir: String,
    },
}

/// The real binaries a control-plane machine runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    /// The kubelet's port-forward server (`tests/go/kubelet`); without it the control-plane
    /// provider's etcd and certificate checks find no kubelet.
    pub kubelet: Option<PathBuf>,
}

/// What one control-plane machine starts with.
pub struct MemberSpec<'a> {
    pub files: &'a Files,
    pub node_name: &'a str,
    /// The machine's own address.
    pub address: IpAddr,
    /// The control-plane endpoint kube-vip announces (in the API server's certificate).
    pub endpoint: &'a HostPort,
    pub service_subnet: &'a str,
    /// The etcd cluster to join (`name=peer URL` of every member, this one included); None for
    /// `kubeadm init`, which starts a new one.
    pub etcd_cluster: Option<String>,
}

/// A control-plane machine's running processes; dropping it stops them.
pub struct Member {
    pub node: String,
    pub address: IpAddr,
    pub apiserver: SocketAddr,
    pub ca: Ca,
    /// A client of the etcd CA, for membership changes.
    etcd_client: Issued,
    etcd_ca_pem: String,
    etcd: Child,
    _others: Vec<Child>,
}

impl Member {
    /// Writes the certificates and starts etcd, kube-apiserver and the kubelet stand-in in `dir`.
    pub async fn start(
        bins: &Binaries,
        dir: &Path,
        spec: &MemberSpec<'_>,
    ) -> Result<Member, StartError> {
        loopback("machine address", &spec.address.to_string())?;
        let vip = loopback("control-plane endpoint", &spec.endpoint.host)?;
        let io = io_error(dir);
        std::fs::create_dir_all(dir.join("pki/etcd")).map_err(io("creating the pki directory"))?;
        let certs = write_certificates(&dir.join("pki"), spec, vip)?;
        let etcd = start_etcd(bins, dir, spec).map_err(io("starting etcd"))?;
        let mut others =
            vec![start_apiserver(bins, dir, spec).map_err(io("starting kube-apiserver"))?];
        if let Some(kubelet) = &bins.kubelet {
            others.push(start_kubelet(kubelet, dir, spec).map_err(io("starting the kubelet"))?);
        }
        Ok(Member {
            node: spec.node_name.to_owned(),
            address: spec.address,
            apiserver: SocketAddr::new(spec.address, spec.endpoint.port),
            ca: certs.ca,
            etcd_client: certs.etcd_client,
            etcd_ca_pem: certs.etcd_ca_pem,
            etcd,
            _others: others,
        })
    }

    /// Whether this member's etcd still runs. etcd exits once it learns that it was removed
    /// from the cluster (KubeadmControlPlane removes a machine's member before deleting the
    /// machine); its API server then hangs on every request that reads storage.
    pub fn etcd_running(&mut self) -> bool {
        matches!(self.etcd.try_wait(), Ok(None))
    }

    /// Waits until this member's API server answers `/readyz`.
    pub async fn wait_ready(&self, dir: &Path) -> Result<(), StartError> {
        const SECONDS: u64 = 60;
        let client = self.https(None).map_err(StartError::Kubeconfig)?;
        let url = format!("https://{}/readyz", self.apiserver);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(SECONDS);
        loop {
            let ready = client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(StartError::NotReady {
                    what: "kube-apiserver",
                    address: self.apiserver.to_string(),
                    seconds: SECONDS,
                    dir: dir.display().to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Adds a member with `peer_url` to this member's etcd cluster (etcd's JSON gateway, as
    /// `kubeadm join --control-plane` does through etcd's client) and returns the cluster for
    /// the new member's `--initial-cluster`, naming it `name`. A member added by an earlier,
    /// failed start is taken as it is.
    pub async fn add_etcd_member(&self, name: &str, peer_url: &str) -> Result<String, StartError> {
        let fail = |reason: String| StartError::EtcdJoin {
            peer: peer_url.to_owned(),
            reason,
        };
        let client = self.https(Some(&self.etcd_client)).map_err(fail)?;
        let call = |route: &str, body: serde_json::Value| {
            let request = client
                .post(format!(
                    "https://{}:2379/v3/cluster/member/{route}",
                    self.address
                ))
                .json(&body);
            async move {
                let answer = request.send().await.map_err(|e| e.to_string())?;
                let answer = answer.error_for_status().map_err(|e| e.to_string())?;
                answer
                    .json::<serde_json::Value>()
                    .await
                    .map_err(|e| e.to_string())
            }
        };
        let listed = call("list", serde_json::json!({})).await.map_err(fail)?;
        let known = members(&listed).iter().any(|(_, url)| url == peer_url);
        let answer = if known {
            listed
        } else {
            call("add", serde_json::json!({"peerURLs": [peer_url]}))
                .await
                .map_err(fail)?
        };
        let cluster: Vec<String> = members(&answer)
            .into_iter()
            .map(|(member, url)| format!("{}={url}", member.unwrap_or_else(|| name.to_owned())))
            .collect();
        Ok(cluster.join(","))
    }

    /// An HTTPS client trusting the cluster CA (for the API server) or, with `identity`, the etcd
    /// CA and presenting that client certificate.
    fn https(&self, identity: Option<&Issued>) -> Result<reqwest::Client, String> {
        let ca = match identity {
            Some(_) => &self.etcd_ca_pem,
            None => &self.ca.cert_pem,
        };
        let ca = reqwest::Certificate::from_pem(ca.as_bytes()).map_err(|e| e.to_string())?;
        let mut builder = reqwest::Client::builder()
            .tls_certs_only([ca])
            .timeout(Duration::from_secs(5));
        if let Some(id) = identity {
            let pem = format!("{}{}", id.cert_pem, id.key_pem);
            let id = reqwest::Identity::from_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
            builder = builder.identity(id);
        }
        builder.build().map_err(|e| e.to_string())
    }
}

/// The (name, first peer URL) of every member in an etcd answer; a member not started yet has
/// no name.
fn members(answer: &serde_json::Value) -> Vec<(Option<String>, String)> {
    answer["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let url = m["peerURLs"][0].as_str()?.to_owned();
            let name = m["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_owned);
            Some((name, url))
        })
        .collect()
}

fn loopback(what: &'static str, address: &str) -> Result<IpAddr, StartError> {
    address
        .parse()
        .ok()
        .filter(IpAddr::is_loopback)
        .ok_or_else(|| StartError::NotLoopback {
            what,
            address: address.to_owned(),
        })
}

fn io_error(dir: &Path) -> impl Fn(&'static str) -> Box<dyn FnOnce(std::io::Error) -> StartError> {
    let dir = dir.display().to_string();
    move |operation| {
        let dir = dir.clone();
        Box::new(move |source| StartError::Io {
            operation,
            dir,
            source,
        })
    }
}

struct Certificates {
    ca: Ca,
    etcd_client: Issued,
    etcd_ca_pem: String,
}

fn file<'a>(files: &'a Files, name: &str) -> Result<&'a [u8], StartError> {
    let path = format!("{PKI}{name}");
    files
        .0
        .get(&path)
        .map(Vec::as_slice)
        .ok_or(StartError::MissingFile(path))
}

/// Copies the CAs and service-account keys the machine was given and issues what kubeadm issues
/// on it: the API server's serving certificate, etcd's, the API server's etcd and kubelet
/// clients, and the kubelet's serving certificate.
fn write_certificates(
    pki: &Path,
    spec: &MemberSpec<'_>,
    vip: IpAddr,
) -> Result<Certificates, StartError> {
    let files = spec.files;
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
    let mut ips = vec![vip, spec.address];
    ips.extend(first_service_ip(spec.service_subnet));
    let apiserver_dns = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        spec.node_name,
    ];
    let own = [spec.address];
    let server = |common_name, dns, ips, client| Leaf {
        common_name,
        organization: None,
        dns,
        ips,
        server: true,
        client,
    };
    let etcd_client =
        etcd_ca.issue(&client_leaf("kube-apiserver-etcd-client", "system:masters"))?;
    let issued = [
        (
            "apiserver",
            ca.issue(&server("kube-apiserver", &apiserver_dns, &ips, false))?,
        ),
        (
            "apiserver-kubelet-client",
            ca.issue(&client_leaf(
                "kube-apiserver-kubelet-client",
                "kubeadm:cluster-admins",
            ))?,
        ),
        (
            "kubelet",
            ca.issue(&server(spec.node_name, &[spec.node_name], &own, false))?,
        ),
        (
            "etcd/server",
            etcd_ca.issue(&server(
                spec.node_name,
                &["localhost", spec.node_name],
                &own,
                true,
            ))?,
        ),
        ("apiserver-etcd-client", etcd_client),
    ];
    for (name, cert) in &issued {
        write(&format!("{name}.crt"), cert.cert_pem.as_bytes())?;
        write(&format!("{name}.key"), cert.key_pem.as_bytes())?;
    }
    let [.., (_, etcd_client)] = issued;
    Ok(Certificates {
        ca,
        etcd_client,
        etcd_ca_pem: etcd_ca.cert_pem,
    })
}

pub fn client_leaf<'a>(common_name: &'a str, organization: &'a str) -> Leaf<'a> {
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

fn spawn(program: &Path, args: &[String], dir: &Path, name: &str) -> std::io::Result<Child> {
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
}

fn start_etcd(bins: &Binaries, dir: &Path, spec: &MemberSpec<'_>) -> std::io::Result<Child> {
    let pki = dir.join("pki");
    let ip = spec.address;
    let p = |f: &str| pki.join(f).display().to_string();
    let peer = format!("https://{ip}:2380");
    let (cluster, state) = match &spec.etcd_cluster {
        Some(cluster) => (cluster.clone(), "existing"),
        None => (format!("{}={peer}", spec.node_name), "new"),
    };
    let args = vec![
        format!("--name={}", spec.node_name),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls=https://{ip}:2379"),
        format!("--advertise-client-urls=https://{ip}:2379"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster={cluster}"),
        format!("--initial-cluster-state={state}"),
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

fn start_apiserver(bins: &Binaries, dir: &Path, spec: &MemberSpec<'_>) -> std::io::Result<Child> {
    let pki = dir.join("pki");
    let p = |f: &str| pki.join(f).display().to_string();
    let args = vec![
        format!("--etcd-servers=https://{}:2379", spec.address),
        format!("--etcd-cafile={}", p("etcd/ca.crt")),
        format!("--etcd-certfile={}", p("apiserver-etcd-client.crt")),
        format!("--etcd-keyfile={}", p("apiserver-etcd-client.key")),
        format!("--bind-address={}", spec.address),
        format!("--secure-port={}", spec.endpoint.port),
        format!("--advertise-address={}", spec.address),
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
        format!("--service-cluster-ip-range={}", spec.service_subnet),
        "--authorization-mode=Node,RBAC".into(),
        "--enable-bootstrap-token-auth=true".into(),
        "--allow-privileged=true".into(),
        // No kube-controller-manager runs in the stand-in, so nothing creates service accounts.
        "--disable-admission-plugins=ServiceAccount".into(),
    ];
    spawn(&bins.kube_apiserver, &args, dir, "kube-apiserver")
}

/// The kubelet's port-forward API: the static pods' ports lead to this machine's etcd and API
/// server.
fn start_kubelet(kubelet: &Path, dir: &Path, spec: &MemberSpec<'_>) -> std::io::Result<Child> {
    let pki = dir.join("pki");
    let (ip, node, port) = (spec.address, spec.node_name, spec.endpoint.port);
    let args = vec![
        format!("--listen={ip}:10250"),
        format!("--cert={}", pki.join("kubelet.crt").display()),
        format!("--key={}", pki.join("kubelet.key").display()),
        format!("--forward=etcd-{node}:2379={ip}:2379"),
        format!("--forward=kube-apiserver-{node}:{port}={ip}:{port}"),
    ];
    spawn(kubelet, &args, dir, "kubelet")
}
