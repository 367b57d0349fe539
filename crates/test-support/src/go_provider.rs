//! metal-stack's Go provider v0.8.0 on a management control plane, as its users have it: its CRDs
//! alone, or its whole components as `clusterctl init` installs them; and the switch to capms by
//! `clusterctl upgrade apply` with a provider override.
//!
//! Its Deployment never runs here: the Go module proxy refuses the Go provider (docs/testing.md),
//! and no kubelet runs pods. What it leaves in the apiserver and metal-api is reproduced by the
//! switch-over tests' fixture instead.

use super::*;
use clusterctl::{capi_providers, capi_version, capms_release};

/// The Go provider's release its users run.
pub const GO_PROVIDER_RELEASE: &str = "v0.8.0";

/// Its CRDs, kustomization, metadata and RBAC, as data.
fn reference() -> PathBuf {
    repo_root().join("../shared/reference/capms-v0.8.0")
}

/// The variables its components and capms's take: the same three names.
fn metal_api_variables(metal_api_url: &str) -> [(&'static str, String); 3] {
    [
        ("METAL_API_URL", metal_api_url.to_owned()),
        ("METAL_API_HMAC", "metal-edit".to_owned()),
        ("METAL_API_HMAC_AUTH_TYPE", "Metal-Edit".to_owned()),
    ]
}

impl ControlPlane {
    /// A management control plane with the Go provider's CRDs (from the shared reference, with
    /// the contract labels its kustomization adds, storing `v1alpha1`) and Cluster API's;
    /// capms's conversion webhook already listens, for when [`Self::install_capms_crds`]
    /// replaces the Go provider's CRDs.
    pub fn go_provider_management(label: &str) -> ControlPlane {
        let cp = ControlPlane::converting(label);
        cp.install_go_provider_crds();
        cp.install_capi_crds();
        cp
    }

    /// The Go provider v0.8.0's CRDs, from the shared reference, with the contract labels its
    /// kustomization adds; over capms's, they take their place (the way back).
    pub fn install_go_provider_crds(&self) {
        let crds = reference().join("crd");
        self.apply(&crds);
        self.kubectl(
            &[
                "label",
                "--overwrite",
                "cluster.x-k8s.io/v1beta1=v1alpha1",
                "cluster.x-k8s.io/v1beta2=v1alpha1",
                "-f",
            ],
            &[crds],
        );
        self.wait_crds_established();
    }

    /// Installs the Go provider v0.8.0 on this control plane (from
    /// [`Self::go_provider_management`]) by the real `clusterctl init --infrastructure
    /// metal-stack:v0.8.0`, from a local repository holding its release files: its
    /// kustomization (`config/default`) built by kubectl with the release's image tag, and its
    /// `metadata.yaml`. Cluster API core and the kubeadm bootstrap provider are recorded in the
    /// inventory first, as an earlier `clusterctl init` would have left them (their components
    /// cannot be built here); cert-manager's CRDs stand for the cert-manager clusterctl wants.
    pub async fn install_go_provider_by_clusterctl_init(&self, metal_api_url: &str) {
        self.apply(&binaries().cert_manager.join("crd"));
        self.wait_crds_established();
        self.record_providers(capi_providers());
        let built = self.kubectl(&["kustomize"], &[reference().join("config/default")]);
        let released = built.replace(
            "cluster-api-metal-stack-controller:latest",
            &format!("cluster-api-metal-stack-controller:{GO_PROVIDER_RELEASE}"),
        );
        let config =
            self.clusterctl_repository("go-provider-repository", GO_PROVIDER_RELEASE, |dir| {
                std::fs::write(dir.join("infrastructure-components.yaml"), released)
                    .expect("write the Go provider's components");
                std::fs::copy(reference().join("metadata.yaml"), dir.join("metadata.yaml"))
                    .expect("the Go provider's metadata.yaml");
            });
        let target = format!("metal-stack:{GO_PROVIDER_RELEASE}");
        let out = self
            .clusterctl_configured(
                &config,
                &["init", "--infrastructure", &target],
                metal_api_url,
            )
            .await;
        assert!(
            out.status.success(),
            "clusterctl init of the Go provider failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.wait_crds_established();
    }

    /// Replaces the installed metal-stack provider with capms by `clusterctl upgrade apply
    /// --infrastructure capms-system/metal-stack:<capms's release>`, its configuration
    /// overriding the metal-stack provider's URL with a local repository of capms's release
    /// files (`manifests/release.sh`). Returns clusterctl's output.
    pub async fn upgrade_to_capms_by_clusterctl(
        &self,
        metal_api_url: &str,
    ) -> std::process::Output {
        let config = self.capms_clusterctl_repository("capms-repository");
        let target = format!("capms-system/metal-stack:{}", capms_release());
        let args = ["upgrade", "apply", "--infrastructure", &target];
        self.clusterctl_configured(&config, &args, metal_api_url)
            .await
    }

    /// A local clusterctl repository `name` under this control plane's directory holding capms's
    /// release files (`manifests/release.sh`) as its release [`capms_release`]. Returns its
    /// `clusterctl.yaml`, for clusterctl's `--config`.
    pub fn capms_clusterctl_repository(&self, name: &str) -> PathBuf {
        self.clusterctl_repository(name, &capms_release(), |dir| {
            let released = Command::new("bash")
                .arg(repo_root().join("manifests/release.sh"))
                .arg(dir)
                .output()
                .expect("release.sh runs");
            assert!(released.status.success(), "manifests/release.sh failed");
        })
    }

    /// A local clusterctl repository under this control plane's directory: the metal-stack
    /// provider's release `version` (its files written by `release`), and Cluster API's
    /// providers, each with Cluster API's `metadata.yaml` (core and the kubeadm providers share
    /// it): clusterctl reads every installed provider's contract and would otherwise ask GitHub.
    /// Returns its `clusterctl.yaml`.
    fn clusterctl_repository(
        &self,
        name: &str,
        version: &str,
        release: impl FnOnce(&Path),
    ) -> PathBuf {
        let repository = self.dir.join(name);
        let metal_stack = repository.join("infrastructure-metal-stack").join(version);
        std::fs::create_dir_all(&metal_stack).expect("provider repository");
        release(&metal_stack);
        let mut providers = vec![serde_json::json!({
            "name": "metal-stack", "type": "InfrastructureProvider",
            "url": format!("file://{}", metal_stack.join("infrastructure-components.yaml").display())})];
        for provider in capi_providers() {
            let dir = repository.join(provider.name).join(capi_version());
            std::fs::create_dir_all(&dir).expect("provider repository");
            std::fs::copy(
                binaries().capi.join("metadata.yaml"),
                dir.join("metadata.yaml"),
            )
            .expect("Cluster API's metadata.yaml (tests/scripts/build.sh caches it)");
            let components = match provider.kind {
                "CoreProvider" => "core-components.yaml",
                _ => "bootstrap-components.yaml",
            };
            providers.push(
                serde_json::json!({"name": provider.provider_name, "type": provider.kind,
                "url": format!("file://{}", dir.join(components).display())}),
            );
        }
        let config = repository.join("clusterctl.yaml");
        let config_text = serde_json::json!({ "providers": providers }).to_string();
        std::fs::write(&config, config_text).expect("write clusterctl.yaml");
        config
    }

    /// The real clusterctl with `config`, on this control plane, with the metal-stack provider's
    /// variables.
    async fn clusterctl_configured(
        &self,
        config: &Path,
        args: &[&str],
        metal_api_url: &str,
    ) -> std::process::Output {
        let home = tempfile::tempdir().expect("home");
        tokio::process::Command::from(clusterctl::clusterctl_command())
            .args(args)
            .arg("--config")
            .arg(config)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", home.path())
            .envs(metal_api_variables(metal_api_url))
            .output()
            .await
            .expect("clusterctl runs")
    }

    /// Points capms's installed admission webhooks at `https://127.0.0.1:<port>` and its CRDs'
    /// conversion at this control plane's conversion server, trusting this control plane's CA:
    /// here the apiserver has no cluster network to reach the Service the components name.
    pub fn route_capms_webhooks_to_loopback(&self, port: u16) {
        let ca = serde_json::to_value(k8s_openapi::ByteString(self.ca_pem())).expect("base64");
        for kind in ["mutating", "validating"] {
            let resource = format!("{kind}webhookconfiguration");
            let name = format!("capms-{kind}-webhook-configuration");
            let current: serde_json::Value =
                serde_json::from_str(&self.kubectl(&["get", &resource, &name, "-o", "json"], &[]))
                    .expect("webhook configuration JSON");
            let webhooks = current["webhooks"].as_array().cloned().unwrap_or_default();
            let ops: Vec<serde_json::Value> = webhooks
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let path = w["clientConfig"]["service"]["path"].as_str().unwrap_or("/");
                    serde_json::json!({"op": "replace", "path": format!("/webhooks/{i}/clientConfig"),
                        "value": {"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca}})
                })
                .collect();
            self.json_patch(&resource, &name, &ops);
        }
        let base = self.conversion_url.as_deref().expect("a conversion server");
        for crd in capms::api::crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let converting = crd
                .spec
                .conversion
                .as_ref()
                .is_some_and(|c| c.strategy == "Webhook");
            if converting {
                let op = serde_json::json!({"op": "replace",
                    "path": "/spec/conversion/webhook/clientConfig",
                    "value": {"url": format!("{base}{}", capms::api::common::CONVERSION_PATH), "caBundle": ca}});
                self.json_patch("customresourcedefinition", &name, &[op]);
            }
        }
    }

    fn json_patch(&self, resource: &str, name: &str, ops: &[serde_json::Value]) {
        let patch = serde_json::to_string(ops).expect("patch JSON");
        self.kubectl(&["patch", resource, name, "--type=json", "-p", &patch], &[]);
    }
}
