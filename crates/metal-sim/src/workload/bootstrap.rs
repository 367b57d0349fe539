//! Reading a machine's bootstrap data the way its operating system does: metal-hammer hands the
//! allocation's `user_data` to cloud-init or Ignition, which write the files and run kubeadm. The
//! node stand-in needs only what kubeadm reads: the files under `/run/kubeadm` and
//! `/etc/kubernetes`.

use base64::Engine;
use serde_json::Value;
use std::collections::BTreeMap;

/// Where the kubeadm bootstrap provider puts `kubeadm init`'s configuration (cloud-config).
pub const INIT_CONFIG: &str = "/run/kubeadm/kubeadm.yaml";
/// Where it puts `kubeadm join`'s configuration (cloud-config).
pub const JOIN_CONFIG: &str = "/run/kubeadm/kubeadm-join-config.yaml";
/// Where it puts either in Ignition data (its `kubeadm.service` runs `/etc/kubeadm.sh`).
pub const IGNITION_CONFIG: &str = "/etc/kubeadm.yml";
/// Static pods kubelet runs; kube-vip's manifest is looked for here.
pub const MANIFESTS: &str = "/etc/kubernetes/manifests/";
/// The cluster's certificates that `kubeadm init` finds instead of generating them.
pub const PKI: &str = "/etc/kubernetes/pki/";

/// Why bootstrap data cannot be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BootstrapError {
    #[error(
        "user_data is neither cloud-config (starting with #cloud-config, optionally after a \
         '## template: jinja' line) nor Ignition JSON"
    )]
    Format,
    #[error("user_data: {0}")]
    Syntax(String),
    #[error("{field}: encoding {found:?} is not supported; valid: {valid}")]
    Encoding {
        field: String,
        found: String,
        valid: &'static str,
    },
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

/// The files bootstrap data writes, by path.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Files(pub BTreeMap<String, Vec<u8>>);

impl Files {
    pub fn text(&self, path: &str) -> Option<String> {
        self.0
            .get(path)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }
}

/// Decodes `user_data` as metal-hammer does (base64, or verbatim when it is not base64) and
/// returns the files it writes.
pub fn files(user_data: &str) -> Result<Files, BootstrapError> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(user_data.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_else(|| user_data.to_owned());
    let body = raw.trim_start();
    if body.is_empty() {
        return Ok(Files::default());
    }
    let body = body
        .strip_prefix("## template: jinja")
        .map(str::trim_start)
        .unwrap_or(body);
    if body.starts_with("#cloud-config") {
        cloud_config_files(body)
    } else if let Ok(config) = serde_json::from_str::<Value>(body) {
        ignition_files(&config)
    } else {
        Err(BootstrapError::Format)
    }
}

fn cloud_config_files(body: &str) -> Result<Files, BootstrapError> {
    let config: Value =
        serde_saphyr::from_str(body).map_err(|e| BootstrapError::Syntax(e.to_string()))?;
    let mut files = BTreeMap::new();
    let entries = config.get("write_files").and_then(Value::as_array);
    for (i, file) in entries.into_iter().flatten().enumerate() {
        let field = |name: &str| format!("write_files[{i}].{name}");
        let path = file
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(field("path"), "missing"))?;
        let content = file.get("content").and_then(Value::as_str).unwrap_or("");
        let encoding = file.get("encoding").and_then(Value::as_str).unwrap_or("");
        let bytes = match encoding {
            "" | "text/plain" => content.as_bytes().to_vec(),
            "b64" | "base64" => base64::engine::general_purpose::STANDARD
                .decode(content.trim())
                .map_err(|e| invalid(field("content"), &e.to_string()))?,
            other => {
                return Err(BootstrapError::Encoding {
                    field: field("encoding"),
                    found: other.to_owned(),
                    valid: "text/plain, b64, base64",
                });
            }
        };
        files.insert(path.to_owned(), bytes);
    }
    Ok(Files(files))
}

fn ignition_files(config: &Value) -> Result<Files, BootstrapError> {
    let mut files = BTreeMap::new();
    let entries = config.pointer("/storage/files").and_then(Value::as_array);
    for (i, file) in entries.into_iter().flatten().enumerate() {
        let field = |name: &str| format!("storage.files[{i}].{name}");
        let path = file
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(field("path"), "missing"))?;
        if let Some(c) = file
            .pointer("/contents/compression")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
        {
            return Err(BootstrapError::Encoding {
                field: field("contents.compression"),
                found: c.to_owned(),
                valid: "none",
            });
        }
        let source = file
            .pointer("/contents/source")
            .and_then(Value::as_str)
            .unwrap_or("data:,");
        let bytes = data_url(source).ok_or_else(|| {
            invalid(
                field("contents.source"),
                "not a data URL (data:,<percent-encoded> or data:;base64,<base64>)",
            )
        })?;
        files.insert(path.to_owned(), bytes);
    }
    Ok(Files(files))
}

/// The bytes of an RFC 2397 `data:` URL, as Ignition reads them.
fn data_url(source: &str) -> Option<Vec<u8>> {
    let (meta, data) = source.strip_prefix("data:")?.split_once(',')?;
    if meta.ends_with(";base64") {
        base64::engine::general_purpose::STANDARD.decode(data).ok()
    } else {
        Some(percent_encoding::percent_decode_str(data).collect())
    }
}

fn invalid(field: String, reason: &str) -> BootstrapError {
    BootstrapError::Invalid {
        field,
        reason: reason.to_owned(),
    }
}

/// What kubeadm does on this machine, read from its configuration files.
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// `kubeadm init`: the first control-plane machine.
    Init(Init),
    /// `kubeadm join --control-plane`.
    JoinControlPlane(Join),
    /// `kubeadm join`: a worker.
    JoinWorker(Join),
}

/// `kubeadm init`'s inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Init {
    /// The ClusterConfiguration document, as `kubeadm init` uploads it to `kubeadm-config`.
    pub cluster_configuration: Value,
    pub endpoint: HostPort,
    pub version: String,
    /// `networking.serviceSubnet` (kubeadm's default when unset).
    pub service_subnet: String,
}

/// `kubeadm join`'s inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Join {
    pub endpoint: HostPort,
    /// `<id>.<secret>`.
    pub token: String,
    /// `sha256:<hex>` pins of the cluster CA's public key.
    pub ca_cert_hashes: Vec<String>,
}

/// A `host:port` of kubeadm's configuration.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl HostPort {
    fn parse(field: &str, text: &str) -> Result<HostPort, BootstrapError> {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| invalid(field.to_owned(), "expected host:port"))?;
        let port = port
            .parse()
            .map_err(|_| invalid(field.to_owned(), &format!("port {port:?} is not a number")))?;
        Ok(HostPort {
            host: host.to_owned(),
            port,
        })
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// kubeadm's role for these files; None for a machine that runs no kubeadm (a firewall, a
/// hand-written bootstrap). `kubeadm init` when its configuration has a ClusterConfiguration,
/// `kubeadm join` when it has a JoinConfiguration.
pub fn role(files: &Files) -> Result<Option<Role>, BootstrapError> {
    let Some((path, text)) = [INIT_CONFIG, JOIN_CONFIG, IGNITION_CONFIG]
        .into_iter()
        .find_map(|path| files.text(path).map(|text| (path, text)))
    else {
        return Ok(None);
    };
    let docs = documents(path, &text)?;
    if let Some(cluster) = kind(&docs, "ClusterConfiguration") {
        return init(path, cluster).map(|init| Some(Role::Init(init)));
    }
    let join = kind(&docs, "JoinConfiguration").ok_or_else(|| {
        invalid(
            path.to_owned(),
            "neither a ClusterConfiguration (kubeadm init) nor a JoinConfiguration (kubeadm join)",
        )
    })?;
    let plan = join_plan(path, join)?;
    Ok(Some(if join.get("controlPlane").is_some() {
        Role::JoinControlPlane(plan)
    } else {
        Role::JoinWorker(plan)
    }))
}

fn init(path: &str, cluster: &Value) -> Result<Init, BootstrapError> {
    let endpoint = str_at(cluster, "/controlPlaneEndpoint").ok_or_else(|| {
        invalid(
            format!("{path}: controlPlaneEndpoint"),
            "missing; the cluster has no endpoint",
        )
    })?;
    Ok(Init {
        endpoint: HostPort::parse("controlPlaneEndpoint", endpoint)?,
        version: str_at(cluster, "/kubernetesVersion")
            .unwrap_or_default()
            .to_owned(),
        service_subnet: str_at(cluster, "/networking/serviceSubnet")
            .unwrap_or("10.96.0.0/12")
            .to_owned(),
        cluster_configuration: cluster.clone(),
    })
}

fn join_plan(path: &str, join: &Value) -> Result<Join, BootstrapError> {
    let field = |name: &str| format!("{path}: discovery.bootstrapToken.{name}");
    let token = join
        .pointer("/discovery/bootstrapToken")
        .ok_or_else(|| invalid(field(""), "missing; only token discovery is played"))?;
    let endpoint = str_at(token, "/apiServerEndpoint")
        .ok_or_else(|| invalid(field("apiServerEndpoint"), "missing"))?;
    Ok(Join {
        endpoint: HostPort::parse(&field("apiServerEndpoint"), endpoint)?,
        token: str_at(token, "/token")
            .ok_or_else(|| invalid(field("token"), "missing"))?
            .to_owned(),
        ca_cert_hashes: token
            .get("caCertHashes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|h| h.as_str().map(str::to_owned))
            .collect(),
    })
}

fn documents(path: &str, text: &str) -> Result<Vec<Value>, BootstrapError> {
    serde_saphyr::from_multiple::<Value>(text).map_err(|e| invalid(path.to_owned(), &e.to_string()))
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind))
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The address kube-vip announces from its static pod on a control-plane machine (its `address`
/// and `port` settings, with `cp_enable` on); None without such a pod: then nothing announces
/// the control-plane IP.
pub fn kube_vip(files: &Files) -> Option<HostPort> {
    files
        .0
        .iter()
        .filter(|(path, _)| path.starts_with(MANIFESTS))
        .filter_map(|(_, bytes)| {
            serde_saphyr::from_str::<Value>(&String::from_utf8_lossy(bytes)).ok()
        })
        .flat_map(|pod| {
            pod.pointer("/spec/containers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter(|c| {
            c.get("image")
                .and_then(Value::as_str)
                .is_some_and(|i| i.contains("kube-vip"))
        })
        .find_map(|container| {
            let env: BTreeMap<&str, &str> = container
                .get("env")
                .and_then(Value::as_array)?
                .iter()
                .filter_map(|e| Some((e.get("name")?.as_str()?, e.get("value")?.as_str()?)))
                .collect();
            if env.get("cp_enable") != Some(&"true") {
                return None;
            }
            Some(HostPort {
                host: env
                    .get("address")
                    .or_else(|| env.get("vip_address"))?
                    .to_string(),
                port: env.get("port").and_then(|p| p.parse().ok()).unwrap_or(6443),
            })
        })
}
