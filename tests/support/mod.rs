//! Test support for integration tests: a real control plane (etcd, kube-apiserver,
//! kube-controller-manager) shared by the tests of one test binary, a fresh namespace per test,
//! and child processes that never outlive their test.
#![allow(dead_code)] // every test binary uses a different part of this module

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Paths of the binaries `tests/k8s/build.sh` built (building what is missing).
pub struct Binaries {
    pub k8s: PathBuf,
    pub capi: PathBuf,
    pub cert_manager: PathBuf,
    /// cert-manager's controller and cainjector.
    pub cert_manager_bin: PathBuf,
}

impl Binaries {
    pub fn kubectl(&self) -> PathBuf {
        self.k8s.join("kubectl")
    }
}

/// Runs `tests/k8s/build.sh` with `args` (building only what is missing) and returns the
/// variables of the env file it names on its last line.
pub fn build(args: &[&str]) -> HashMap<String, String> {
    let out = Command::new("bash")
        .arg(repo_root().join("tests/k8s/build.sh"))
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("tests/k8s/build.sh runs");
    assert!(out.status.success(), "tests/k8s/build.sh {args:?} failed");
    let env_file = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    std::fs::read_to_string(&env_file)
        .unwrap_or_else(|e| panic!("{env_file}: {e}"))
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

pub fn binaries() -> &'static Binaries {
    static BINARIES: OnceLock<Binaries> = OnceLock::new();
    BINARIES.get_or_init(|| {
        let env = build(&[]);
        Binaries {
            k8s: PathBuf::from(&env["CAPMS_K8S_BIN"]),
            capi: PathBuf::from(&env["CAPMS_CAPI_BIN"]),
            cert_manager: PathBuf::from(env.get("CAPMS_CERT_MANAGER").cloned().unwrap_or_default()),
            cert_manager_bin: PathBuf::from(
                env.get("CAPMS_CERT_MANAGER_BIN")
                    .cloned()
                    .unwrap_or_default(),
            ),
        }
    })
}

/// A control plane started by `tests/k8s/controlplane.sh`. Its watchdog stops it when this test
/// binary exits, whether the tests passed, panicked or the process was killed.
pub struct ControlPlane {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    _tmp: tempfile::TempDir,
}

impl ControlPlane {
    /// The control plane of this test binary, started on first use, with our CRDs and Cluster
    /// API's installed and established.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| {
            binaries();
            let tmp = tempfile::Builder::new()
                .prefix("capms-cp-")
                .tempdir()
                .expect("temp dir");
            let dir = tmp.path().to_path_buf();
            let status = Command::new("bash")
                .arg(repo_root().join("tests/k8s/controlplane.sh"))
                .args(["start"])
                .arg(&dir)
                .args(["--owner-pid", &std::process::id().to_string()])
                .stdout(Stdio::null())
                .status()
                .expect("controlplane.sh runs");
            assert!(
                status.success(),
                "the control plane did not start; logs in {}",
                dir.display()
            );
            let cp = ControlPlane {
                kubeconfig: dir.join("kubeconfig"),
                dir,
                _tmp: tmp,
            };
            cp.apply(&repo_root().join("manifests/crd"));
            let capi_crds = binaries().capi.join("crd");
            cp.apply(&capi_crds.join("core"));
            cp.apply(&capi_crds.join("bootstrap"));
            cp.wait_crds_established();
            cp
        })
    }

    /// Server-side applies a manifest file or directory (CAPI's CRDs are too large for the
    /// last-applied annotation of a client-side apply).
    pub fn apply(&self, path: &Path) -> String {
        self.kubectl(
            &["apply", "--server-side", "--force-conflicts", "-f"],
            &[path.to_path_buf()],
        )
    }

    /// Runs the real kubectl against this control plane and returns its stdout; panics with its
    /// stderr when it fails.
    pub fn kubectl(&self, args: &[&str], paths: &[PathBuf]) -> String {
        let out = self.kubectl_output(args, paths);
        assert!(
            out.status.success(),
            "kubectl {args:?} {paths:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn kubectl_output(&self, args: &[&str], paths: &[PathBuf]) -> std::process::Output {
        let mut cmd = Command::new(binaries().kubectl());
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        for p in paths {
            cmd.arg(p);
        }
        cmd.output().expect("kubectl runs")
    }

    pub async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("client config");
        Client::try_from(config).expect("client")
    }

    /// A fresh namespace for one test, deleted when the returned guard drops (also on panic).
    pub async fn namespace(&self, prefix: &str) -> TestNamespace {
        let client = self.client().await;
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace created");
        TestNamespace {
            name: created.metadata.name.expect("generated name"),
            kubeconfig: self.kubeconfig.clone(),
            client,
        }
    }

    /// A serving certificate for 127.0.0.1 signed by this control plane's CA, written as
    /// `tls.crt`/`tls.key` into `dir` (what a webhook server under test loads).
    pub fn issue_serving_cert(&self, dir: &Path) {
        let status = Command::new("bash")
            .arg(repo_root().join("certs/make-local-certs.sh"))
            .arg(self.dir.join("pki"))
            .arg(dir)
            .status()
            .expect("certs/make-local-certs.sh runs");
        assert!(status.success(), "issuing a serving certificate failed");
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("pki/ca.crt")).expect("CA certificate")
    }
}

/// Waits until every CRD named here reports Established.
pub async fn wait_established(client: &Client, names: &[String]) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(crds.clone(), name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not Established within 60 s"))
        .unwrap_or_else(|e| panic!("watching CRD {name}: {e}"));
    }
}

pub struct TestNamespace {
    pub name: String,
    pub client: Client,
    kubeconfig: PathBuf,
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot await; kubectl does the delete synchronously and does not wait for the
        // namespace controller to finish.
        let _ = Command::new(binaries().kubectl())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A child process that dies with its test: killed when the guard drops, and (through
/// PR_SET_PDEATHSIG, via `setpriv`) when the thread that started it ends.
pub struct ChildProcess {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl ChildProcess {
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log_dir: &Path,
    ) -> Self {
        let log = log_dir.join(format!("{name}.log"));
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--"])
            .arg(program)
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log fd"))
            .stderr(log_file);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        ChildProcess {
            name: name.to_owned(),
            child,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<_> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Polls `check` until it returns Some, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A metal-api simulator running inside the test's runtime on a free loopback port.
pub struct RunningSim {
    pub sim: capms::sim::Sim,
    pub url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl RunningSim {
    pub async fn start(inventory: capms::sim::inventory::Inventory, base_path: &str) -> RunningSim {
        capms::tls::install_default_provider();
        let config = capms::sim::SimConfig {
            base_path: base_path.to_owned(),
            keys: capms::sim::HmacKeys::lab(),
            timings: capms::sim::Timings::fast(),
        };
        let sim = capms::sim::Sim::new(&inventory, config).expect("inventory is valid");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(capms::sim::serve(listener, sim.clone(), async move {
            let _ = rx.await;
        }));
        let url = format!("http://{addr}{}", base_path.trim_end_matches('/'));
        RunningSim {
            sim,
            url,
            shutdown: Some(tx),
        }
    }

    /// A client authenticated with the lab key of `auth_type`.
    pub fn client(&self, auth_type: capms::metal::hmac::AuthType) -> capms::metal::Client {
        let key = capms::sim::HmacKeys::lab().keys[&auth_type].clone();
        let auth = capms::metal::Auth::Hmac { key, auth_type };
        let mut config = capms::metal::Config::new(url::Url::parse(&self.url).expect("url"), auth);
        config.timeout = Duration::from_secs(5);
        capms::metal::Client::new(config).expect("client")
    }

    pub fn editor(&self) -> capms::metal::Client {
        self.client(capms::metal::hmac::AuthType::Edit)
    }
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl ControlPlane {
    /// A kubeconfig for user `name` (no groups), with a client certificate from this control
    /// plane's CA: what RBAC tests run a component as.
    pub fn user_kubeconfig(&self, name: &str, dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).expect("dir");
        let pki = self.dir.join("pki");
        // A random serial, not -CAcreateserial: tests sign with this CA concurrently and a shared
        // ca.srl file races.
        let script = r#"set -e
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$3" -keyout "$2/$3.key" -out "$2/$3.csr" 2>/dev/null
openssl x509 -req -in "$2/$3.csr" -CA "$1/ca.crt" -CAkey "$1/ca.key" -days 30 -out "$2/$3.crt" \
  -set_serial "0x$(openssl rand -hex 16)" -extfile <(printf 'extendedKeyUsage=clientAuth') 2>/dev/null"#;
        let status = Command::new("bash")
            .args(["-c", script, "issue"])
            .arg(&pki)
            .arg(dir)
            .arg(name)
            .status()
            .expect("openssl");
        assert!(
            status.success(),
            "issuing a client certificate for {name} failed"
        );
        let admin = std::fs::read_to_string(&self.kubeconfig).expect("admin kubeconfig");
        let server = admin
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .expect("server")
            .to_owned();
        let b64 = |p: PathBuf| {
            let out = Command::new("base64")
                .arg("-w0")
                .arg(p)
                .output()
                .expect("base64");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: {name}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: {name}\n  context: {{cluster: local, user: {name}}}\ncurrent-context: {name}\n",
            b64(pki.join("ca.crt")),
            b64(dir.join(format!("{name}.crt"))),
            b64(dir.join(format!("{name}.key"))),
        );
        let path = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, kubeconfig).expect("write kubeconfig");
        path
    }
}

impl ControlPlane {
    /// Registers Cluster API's own admission webhooks (from its module's
    /// `config/webhook/manifests.yaml`), pointed at a manager serving on 127.0.0.1:`port` with a
    /// certificate of this control plane's CA, scoped to `namespace`.
    pub fn register_capi_webhooks(&self, port: u16, namespace: &str, work: &Path) {
        use base64::Engine;
        let text = std::fs::read_to_string(binaries().capi.join("crd/core-webhook/manifests.yaml"))
            .expect("CAPI webhook manifests");
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem());
        for (i, doc) in text
            .split("\n---")
            .filter(|d| d.contains("kind:"))
            .enumerate()
        {
            let mut config: serde_json::Value =
                serde_saphyr::from_str(doc).expect("CAPI webhook YAML");
            let name = config["metadata"]["name"]
                .as_str()
                .unwrap_or("capi")
                .to_owned();
            config["metadata"]["name"] = serde_json::json!(format!("capi-{name}-{namespace}"));
            for w in config["webhooks"].as_array_mut().into_iter().flatten() {
                let path = w["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                w["clientConfig"] = serde_json::json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca});
                w["namespaceSelector"] =
                    serde_json::json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
            }
            let file = work.join(format!("capi-webhooks-{i}.json"));
            std::fs::write(&file, serde_json::to_vec(&config).expect("json")).expect("write");
            self.apply(&file);
        }
    }
}

impl ControlPlane {
    /// Waits until every CRD installed so far is Established.
    pub fn wait_crds_established(&self) {
        self.kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd",
                "--all",
            ],
            &[],
        );
    }

    /// Registers capms' webhook configurations pointed at 127.0.0.1:`port`, trusting this
    /// control plane's CA, scoped to `namespace` (and named after it, so tests do not collide).
    pub fn register_capms_webhooks(&self, port: u16, namespace: &str, work: &Path) {
        let config = capms::webhooks::ClientConfig::Url {
            base: format!("https://127.0.0.1:{port}"),
            ca_bundle: self.ca_pem(),
        };
        for mut doc in capms::webhooks::webhook_configurations(&config, None) {
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or("capms")
                .to_owned();
            doc["metadata"]["name"] = serde_json::json!(format!("{name}-{namespace}"));
            for w in doc["webhooks"].as_array_mut().into_iter().flatten() {
                w["namespaceSelector"] =
                    serde_json::json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
            }
            let file = work.join(format!(
                "capms-{}-{namespace}.json",
                doc["kind"].as_str().unwrap_or("webhooks")
            ));
            std::fs::write(&file, serde_json::to_vec(&doc).expect("json")).expect("write");
            self.apply(&file);
        }
    }
}

/// A `capms manager` process of a test, its webhooks on 127.0.0.1.
pub struct CapmsManager {
    pub process: ChildProcess,
    pub webhook_port: u16,
    pub health_port: u16,
    pub metrics_port: u16,
}

impl CapmsManager {
    /// Starts `capms manager` for `namespace` against the shared control plane and `metal_api_url`,
    /// serving webhooks with the certificate in `cert_dir`.
    pub fn start(
        name: &str,
        namespace: &str,
        metal_api_url: &str,
        cert_dir: &Path,
        work: &Path,
        extra: &[String],
    ) -> CapmsManager {
        let cp = ControlPlane::shared();
        let (webhook_port, health_port, metrics_port) = (free_port(), free_port(), free_port());
        let mut args = vec![
            "manager".to_owned(),
            format!("--kubeconfig={}", cp.kubeconfig.display()),
            format!("--namespace={namespace}"),
            "--webhook-host=127.0.0.1".into(),
            format!("--webhook-port={webhook_port}"),
            format!("--webhook-cert-dir={}", cert_dir.display()),
            format!("--health-addr=127.0.0.1:{health_port}"),
            format!("--metrics-addr=127.0.0.1:{metrics_port}"),
            "--metrics-secure=false".into(),
        ];
        args.extend(extra.iter().cloned());
        let process = ChildProcess::spawn(
            name,
            Path::new(env!("CARGO_BIN_EXE_capms")),
            &args,
            &[
                ("METAL_API_URL", metal_api_url),
                ("METAL_API_HMAC", "metal-edit"),
                ("RUST_LOG", "info"),
            ],
            work,
        );
        CapmsManager {
            process,
            webhook_port,
            health_port,
            metrics_port,
        }
    }

    /// The status `/readyz` answers with, if it answers.
    pub async fn readyz(&self) -> Option<u16> {
        reqwest::get(format!("http://127.0.0.1:{}/readyz", self.health_port))
            .await
            .ok()
            .map(|r| r.status().as_u16())
    }

    pub async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.readyz().await != Some(200) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "capms not ready after 30 s; log:\n{}",
                self.process.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
