//! What capms's integration tests and benchmark share: a real control plane (etcd,
//! kube-apiserver, kube-controller-manager) shared by the tests of one test binary, a fresh
//! namespace per test, the managers and the simulator they run, the metal-api spec as a
//! contract, a mock apiserver for in-process reconciles, and child processes that never outlive
//! their test.

// Test code fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The repository's root (this crate sits in `crates/test-support`).
pub fn repo_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// A binary of this workspace (`capms`, `metal-sim`), built by cargo first so that it is the
/// current code's, in the profile of the program asking (debug for tests, release for the
/// benchmark). The integration tests live in a package of their own, so cargo does not hand
/// them the product's binary.
pub fn workspace_binary(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let release = !cfg!(debug_assertions);
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !built.iter().any(|b| b == name) {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        // The whole workspace's features, as `cargo test --workspace` built this binary already:
        // the default members alone unify fewer features, and would build it all again.
        cmd.current_dir(repo_root()).args([
            "build",
            "--locked",
            "--quiet",
            "--workspace",
            "--bin",
            name,
        ]);
        // What cargo set for the program asking (its package's name, version and manifest)
        // would read as changed inputs of the build scripts that track those variables (ring's,
        // through cc): each build from a test or the benchmark would rebuild them and
        // everything above them, and the next build from a shell again.
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(set_by_cargo_for_its_package) {
                cmd.env_remove(key);
            }
        }
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo runs");
        assert!(status.success(), "cargo build --bin {name} failed");
        built.push(name.to_owned());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo_root().join("target"), PathBuf::from);
    target
        .join(if release { "release" } else { "debug" })
        .join(name)
}

/// Is `var` one that cargo sets for a package's program it runs (not for cargo itself)?
fn set_by_cargo_for_its_package(var: &str) -> bool {
    const PREFIXES: [&str; 3] = ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_BIN_"];
    const NAMES: [&str; 5] = [
        "CARGO_CRATE_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    PREFIXES.iter().any(|p| var.starts_with(p)) || NAMES.contains(&var)
}

/// Paths of the binaries `tests/scripts/build.sh` built (building what is missing).
pub struct Binaries {
    pub k8s: PathBuf,
    pub capi: PathBuf,
    pub cert_manager: PathBuf,
    /// cert-manager's controller and cainjector.
    pub cert_manager_bin: PathBuf,
    /// The node stand-in's kubelet port-forward server (tests/go/kubelet).
    pub kubelet: PathBuf,
}

impl Binaries {
    pub fn kubectl(&self) -> PathBuf {
        self.k8s.join("kubectl")
    }
}

/// Runs `tests/scripts/build.sh` with `args` (building only what is missing) and returns the
/// variables of the env file it names on its last line.
pub fn build(args: &[&str]) -> HashMap<String, String> {
    let out = Command::new("bash")
        .arg(repo_root().join("tests/scripts/build.sh"))
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("tests/scripts/build.sh runs");
    assert!(
        out.status.success(),
        "tests/scripts/build.sh {args:?} failed"
    );
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
            kubelet: PathBuf::from(env.get("CAPMS_KUBELET").cloned().unwrap_or_default()),
        }
    })
}

/// A control plane started by `tests/scripts/controlplane.sh`. Its watchdog stops it when this test
/// binary exits, whether the tests passed, panicked or the process was killed.
pub struct ControlPlane {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// The conversion webhook of capms's CRDs, when they are installed.
    conversion: Option<conversion::WebhookServer>,
    /// Where that webhook answers (`https://127.0.0.1:<port>`).
    pub conversion_url: Option<String>,
    _tmp: tempfile::TempDir,
}

impl ControlPlane {
    /// The control plane of this test binary, started on first use, with our CRDs and Cluster
    /// API's installed and established.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| ControlPlane::management("shared"))
    }

    /// A control plane of its own (for tests that need two management clusters), with our CRDs
    /// and Cluster API's installed and established; stopped when dropped.
    pub fn management(label: &str) -> ControlPlane {
        let cp = ControlPlane::converting(label);
        cp.install_capms_crds();
        cp.install_capi_crds();
        cp
    }

    /// A bare control plane with capms's conversion webhook listening.
    pub(crate) fn converting(label: &str) -> ControlPlane {
        let mut cp = ControlPlane::bare(label);
        let (server, url) = cp.start_conversion_server();
        cp.conversion = Some(server);
        cp.conversion_url = Some(url);
        cp
    }

    /// Cluster API's CRDs: core, kubeadm bootstrap and control plane; then waits until every
    /// CRD is established.
    pub(crate) fn install_capi_crds(&self) {
        let cp = self;
        let capi_crds = binaries().capi.join("crd");
        cp.apply(&capi_crds.join("core"));
        for provider in ["bootstrap", "controlplane"] {
            let crds = capi_crds.join(provider);
            cp.apply(&crds);
            // The contract labels Cluster API's kustomization adds to the providers' CRDs: core
            // finds the version of a referenced kind by them.
            cp.kubectl(
                &[
                    "label",
                    "--overwrite",
                    "cluster.x-k8s.io/v1beta1=v1beta1",
                    "cluster.x-k8s.io/v1beta2=v1beta2",
                    "-f",
                ],
                &[crds],
            );
        }
        cp.wait_crds_established();
    }

    /// A control plane with nothing installed: what a workload cluster's API is.
    pub fn bare(label: &str) -> ControlPlane {
        binaries();
        let tmp = tempfile::Builder::new()
            .prefix(&format!("capms-cp-{label}-"))
            .tempdir()
            .expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let status = Command::new("bash")
            .arg(repo_root().join("tests/scripts/controlplane.sh"))
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
        ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            conversion: None,
            conversion_url: None,
            _tmp: tmp,
        }
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
        let name = created.metadata.name.expect("generated name");
        // Every Secret of the test is something capms must never log.
        secrets::watch_namespace(client.clone(), &name);
        TestNamespace {
            name,
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

impl Drop for ControlPlane {
    /// Stops exactly the processes this control plane started (the shared one lives until the
    /// test binary exits, where the watchdog stops it).
    fn drop(&mut self) {
        self.conversion.take();
        let _ = Command::new("bash")
            .arg(repo_root().join("tests/scripts/controlplane.sh"))
            .arg("stop")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Waits until every CRD named here reports Established.
pub async fn wait_established(client: &Client, names: &[String]) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        tokio::time::timeout(
            LOADED_MACHINE_WAIT,
            await_condition(crds.clone(), name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not Established within {LOADED_MACHINE_WAIT:?}"))
        .unwrap_or_else(|e| panic!("watching CRD {name}: {e}"));
    }
}

/// `kubectl delete ARGS --ignore-not-found`, for a guard's drop (which cannot await, nor fail).
pub(crate) fn delete_quietly(kubeconfig: &Path, args: &[&str]) {
    let _ = Command::new(binaries().kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("delete")
        .args(args)
        .arg("--ignore-not-found")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
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
        let args = ["namespace", &self.name, "--wait=false"];
        delete_quietly(&self.kubeconfig, &args);
    }
}

/// Polls `check` until it returns Some, for `timeout` but at least [`LOADED_MACHINE_WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_seen(what, timeout, || {
        let seen = check();
        async move { seen.await.ok_or_else(String::new) }
    })
    .await
}

/// No wait on a condition gives up sooner: on a 2-core machine shared with a second heavy job,
/// what takes seconds alone has taken half a minute.
pub const LOADED_MACHINE_WAIT: Duration = Duration::from_secs(180);

/// Polls `check` until it returns Ok, for `timeout` (at least [`LOADED_MACHINE_WAIT`]); when
/// that runs out, the failure says what `check` last saw (its Err).
pub async fn eventually_seen<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    match within(timeout, check).await {
        Ok(v) => v,
        Err(seen) => panic!("timed out waiting for {what}; {seen}"),
    }
}

/// Polls `check` until it returns Ok, for `timeout` (at least [`LOADED_MACHINE_WAIT`]); Err
/// says, once that runs out, how long it waited and what `check` last saw.
pub async fn within<T, F, Fut>(timeout: Duration, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let timeout = timeout.max(LOADED_MACHINE_WAIT);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let seen = match check().await {
            Ok(v) => return Ok(v),
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("after {timeout:?} last seen: {seen}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub mod activity;
pub mod clusterctl;
pub mod contract;
mod conversion;
pub mod fuzz;
mod go_provider;
mod kube_faults;
mod manager;
pub mod mock_apiserver;
mod ports;
mod process;
pub mod protos;
mod registration;
pub mod secrets;
mod sim;
pub use kube_faults::ConflictingWrites;
pub use manager::{
    CapiManager, CapmsManager, KubeadmProviders, ManagerOn, Managers, spawn_core_manager,
};
pub use ports::free_port;
pub use process::ChildProcess;
pub use registration::{shipped_cluster_role, user_binding};
pub use sim::{LAB_PROJECT, RunningSim};

#[cfg(test)]
mod tests {
    use super::set_by_cargo_for_its_package;

    #[test]
    fn a_workspace_build_from_a_test_forgets_what_cargo_set_for_the_test_s_package() {
        for set in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_CRATE_NAME",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo_for_its_package(set), "{set}");
        }
        for kept in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "PATH",
        ] {
            assert!(!set_by_cargo_for_its_package(kept), "{kept}");
        }
    }
}
