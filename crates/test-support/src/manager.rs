//! A `capms manager` process of a test.

use super::*;

/// Where a manager of a test runs: its control plane, the namespace it watches, and the
/// directory for its logs and certificates.
pub struct ManagerOn<'a> {
    pub cp: &'a ControlPlane,
    pub namespace: &'a str,
    pub work: &'a Path,
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
        let on = ManagerOn {
            cp: ControlPlane::shared(),
            namespace,
            work,
        };
        CapmsManager::start_on(&on, name, metal_api_url, cert_dir, extra)
    }

    /// Starts `capms manager` for `on.namespace` against the control plane `on.cp`.
    pub fn start_on(
        on: &ManagerOn<'_>,
        name: &str,
        metal_api_url: &str,
        cert_dir: &Path,
        extra: &[String],
    ) -> CapmsManager {
        Self::start_logging(on, name, metal_api_url, cert_dir, extra, "info,capms=debug")
    }

    /// [`Self::start_on`] with `RUST_LOG=log` (the benchmark logs less).
    pub fn start_logging(
        on: &ManagerOn<'_>,
        name: &str,
        metal_api_url: &str,
        cert_dir: &Path,
        extra: &[String],
        log: &str,
    ) -> CapmsManager {
        let admin = on.cp.kubeconfig.clone();
        Self::start_as(on, (name, &admin), metal_api_url, cert_dir, extra, log)
    }

    /// [`Self::start_logging`] as the user of `kubeconfig`.
    pub fn start_as(
        on: &ManagerOn<'_>,
        (name, kubeconfig): (&str, &Path),
        metal_api_url: &str,
        cert_dir: &Path,
        extra: &[String],
        log: &str,
    ) -> CapmsManager {
        let (namespace, work) = (on.namespace, on.work);
        let (webhook_port, health_port, metrics_port) = (free_port(), free_port(), free_port());
        let mut args = vec![
            "manager".to_owned(),
            format!("--kubeconfig={}", kubeconfig.display()),
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
            &crate::workspace_binary("capms"),
            &args,
            &[
                ("METAL_API_URL", metal_api_url),
                ("METAL_API_HMAC", "metal-edit"),
                ("RUST_LOG", log),
                // As the manager's Deployment sets it (see capms's allocator).
                ("MIMALLOC_PURGE_DELAY", "100"),
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
        let deadline = tokio::time::Instant::now() + crate::LOADED_MACHINE_WAIT;
        while self.readyz().await != Some(200) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "capms not ready after {:?}; log:\n{}",
                crate::LOADED_MACHINE_WAIT,
                self.process.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Cluster API's core manager and capms side by side on `on`, both with their admission webhooks
/// registered (scoped to `on.namespace`), as in a real installation: capms runs as a user of
/// its own with the shipped ClusterRole, and its own updates skip admission.
pub struct Managers {
    pub capi: CapiManager,
    pub capms: CapmsManager,
}

impl Managers {
    /// capms runs against `metal_api_url` with `extra` flags and `RUST_LOG=log`.
    pub async fn start(
        on: &ManagerOn<'_>,
        metal_api_url: &str,
        extra: &[String],
        log: &str,
    ) -> Managers {
        Self::start_with_capi_args(on, metal_api_url, (extra, log), &[]).await
    }

    /// [`Self::start`] with Cluster API's core manager given `capi_args` too (a feature gate).
    pub async fn start_with_capi_args(
        on: &ManagerOn<'_>,
        metal_api_url: &str,
        (extra, log): (&[String], &str),
        capi_args: &[&str],
    ) -> Managers {
        let (binary, webhooks) = ("cluster-api-manager", "crd/core-webhook");
        let capi = CapiManager::start_binary(on, binary, "capi", webhooks, capi_args).await;
        let certs = on.work.join("certs");
        on.cp.issue_serving_cert(&certs);
        let user = format!("capms-{}", on.namespace);
        let kubeconfig = on.cp.shipped_role_kubeconfig(&user, &on.work.join("user"));
        let identity = ("capms", kubeconfig.as_path());
        let capms = CapmsManager::start_as(on, identity, metal_api_url, &certs, extra, log);
        capms.wait_ready().await;
        on.cp
            .register_capms_webhooks(capms.webhook_port, on.namespace, on.work, Some(&user));
        Managers { capi, capms }
    }
}

/// The real Cluster API core manager of a test, its admission webhooks registered (scoped to the
/// test's namespace), as in a real installation.
pub struct CapiManager {
    pub process: ChildProcess,
    /// Where its webhooks (admission and `/convert`) answer.
    pub webhook_port: u16,
}

impl CapiManager {
    /// Starts Cluster API's core manager for `on.namespace` and waits until it is ready and its
    /// webhooks are registered.
    pub async fn start(on: &ManagerOn<'_>) -> CapiManager {
        CapiManager::start_binary(on, "cluster-api-manager", "capi", "crd/core-webhook", &[]).await
    }

    /// Starts one of Cluster API's managers (`binary` in the CAPI cache) for `on.namespace`,
    /// waits until it is ready and registers its webhooks from `webhooks/manifests.yaml` (a
    /// directory of the CAPI cache) under the name `provider`.
    pub async fn start_binary(
        on: &ManagerOn<'_>,
        binary: &str,
        provider: &str,
        webhooks: &str,
        extra: &[&str],
    ) -> CapiManager {
        let (webhook_port, health_port) = (free_port(), free_port());
        let process = spawn(on, binary, provider, (webhook_port, health_port), extra);
        eventually(
            &format!("{binary} ready"),
            Duration::from_secs(60),
            || async {
                reqwest::get(format!("http://127.0.0.1:{health_port}/readyz"))
                    .await
                    .ok()?
                    .status()
                    .is_success()
                    .then_some(())
            },
        )
        .await;
        let manifests = binaries().capi.join(webhooks).join("manifests.yaml");
        on.cp
            .register_webhooks_of(provider, &manifests, webhook_port, on.namespace, on.work);
        CapiManager {
            process,
            webhook_port,
        }
    }
}

/// Spawns one of Cluster API's managers for `on.namespace` with a serving certificate from the
/// control plane's CA, without waiting for it or registering its webhooks.
fn spawn(
    on: &ManagerOn<'_>,
    binary: &str,
    provider: &str,
    (webhook_port, health_port): (u16, u16),
    extra: &[&str],
) -> ChildProcess {
    let cert_dir = on.work.join(format!("{provider}-certs"));
    on.cp.issue_serving_cert(&cert_dir);
    let mut args = vec![
        format!("--kubeconfig={}", on.cp.kubeconfig.display()),
        format!("--webhook-port={webhook_port}"),
        format!("--webhook-cert-dir={}", cert_dir.display()),
        format!("--health-addr=127.0.0.1:{health_port}"),
        format!("--diagnostics-address=127.0.0.1:{}", free_port()),
        "--insecure-diagnostics".into(),
        "--leader-elect=false".into(),
        format!("--namespace={}", on.namespace),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    ChildProcess::spawn(binary, &binaries().capi.join(binary), &args, &[], on.work)
}

/// Cluster API's core manager for `on.namespace`, its webhooks not registered (tests that
/// create only infrastructure objects need none of them).
pub fn spawn_core_manager(on: &ManagerOn<'_>) -> ChildProcess {
    spawn(
        on,
        "cluster-api-manager",
        "capi",
        (free_port(), free_port()),
        &[],
    )
}

/// Cluster API's kubeadm bootstrap and control-plane providers of a test, their webhooks
/// registered.
pub struct KubeadmProviders {
    pub bootstrap: CapiManager,
    pub control_plane: CapiManager,
}

impl KubeadmProviders {
    /// Both providers with the Ignition bootstrap format (`--flavor ignition`) and ClusterClass
    /// templates (`--flavor topology`) enabled, as `clusterctl init` does with
    /// `CLUSTER_TOPOLOGY=true`.
    pub async fn start(on: &ManagerOn<'_>) -> KubeadmProviders {
        let gates = ["--feature-gates=KubeadmBootstrapFormatIgnition=true,ClusterTopology=true"];
        KubeadmProviders {
            bootstrap: CapiManager::start_binary(
                on,
                "kubeadm-bootstrap-manager",
                "cabpk",
                "crd/bootstrap-webhook",
                &gates,
            )
            .await,
            control_plane: CapiManager::start_binary(
                on,
                "kubeadm-control-plane-manager",
                "kcp",
                "crd/controlplane-webhook",
                &gates,
            )
            .await,
        }
    }
}
