//! The real clusterctl against a test's control plane, and the provider inventory `clusterctl
//! init` leaves behind (which `clusterctl move` reads on both sides).

use super::*;

/// A provider as `clusterctl init` records it: its inventory name, type, namespace, version and
/// the directory of its CRDs (None when they come labelled with its components).
pub(crate) struct Installed {
    pub(crate) name: &'static str,
    pub(crate) provider_name: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) namespace: &'static str,
    pub(crate) version: String,
    pub(crate) crds: Option<PathBuf>,
}

/// Cluster API core and the kubeadm bootstrap provider.
pub(crate) fn capi_providers() -> [Installed; 2] {
    let capi = binaries().capi.join("crd");
    [
        Installed {
            name: "cluster-api",
            provider_name: "cluster-api",
            kind: "CoreProvider",
            namespace: "capi-system",
            version: capi_version(),
            crds: Some(capi.join("core")),
        },
        Installed {
            name: "bootstrap-kubeadm",
            provider_name: "kubeadm",
            kind: "BootstrapProvider",
            namespace: "capi-kubeadm-bootstrap-system",
            version: capi_version(),
            crds: Some(capi.join("bootstrap")),
        },
    ]
}

/// The infrastructure provider metal-stack, in its namespace, at `version`.
pub(crate) fn metal_stack_provider(version: String, crds: Option<PathBuf>) -> Installed {
    Installed {
        name: "infrastructure-metal-stack",
        provider_name: "metal-stack",
        kind: "InfrastructureProvider",
        namespace: "capms-system",
        version,
        crds,
    }
}

/// capms's release version, as its clusterctl repository names it.
pub fn capms_release() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// Cluster API's release, from the name of its cache directory (`capi-<version>`).
pub(crate) fn capi_version() -> String {
    binaries()
        .capi
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("capi-"))
        .expect("the CAPI cache directory is named capi-<version>")
        .to_owned()
}

/// The real clusterctl, with its check for a newer release off: that check calls GitHub, and
/// tests dial nothing but loopback.
pub fn clusterctl_command() -> Command {
    let mut command = Command::new(binaries().capi.join("clusterctl"));
    command.env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true");
    command
}

impl ControlPlane {
    /// Records Cluster API core, the kubeadm bootstrap provider and capms as `clusterctl init`
    /// does: clusterctl's inventory CRD, a Provider object per provider in its namespace, and
    /// the `clusterctl.cluster.x-k8s.io` and provider labels on every CRD (clusterctl move
    /// discovers the kinds it moves by that label).
    pub fn record_clusterctl_inventory(&self) {
        let capms = metal_stack_provider(capms_release(), Some(repo_root().join("manifests/crd")));
        self.record_providers(capi_providers().into_iter().chain([capms]));
    }

    /// Records `providers` as `clusterctl init` does (see [`Self::record_clusterctl_inventory`]).
    pub(crate) fn record_providers(&self, providers: impl IntoIterator<Item = Installed>) {
        self.apply(&binaries().capi.join("crd/clusterctl"));
        self.wait_crds_established();
        for p in providers {
            if let Some(crds) = &p.crds {
                let provider_label = format!("cluster.x-k8s.io/provider={}", p.name);
                self.kubectl(
                    &[
                        "label",
                        "--overwrite",
                        "clusterctl.cluster.x-k8s.io=",
                        &provider_label,
                        "-f",
                    ],
                    std::slice::from_ref(crds),
                );
            }
            let namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": p.namespace}});
            let provider = serde_json::json!({
                "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "kind": "Provider",
                "metadata": {"name": p.name, "namespace": p.namespace, "labels": {
                    "clusterctl.cluster.x-k8s.io": "", "cluster.x-k8s.io/provider": p.name}},
                "providerName": p.provider_name, "type": p.kind, "version": p.version,
            });
            let file = self.dir.join(format!("inventory-{}.json", p.name));
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [namespace, provider]});
            std::fs::write(&file, serde_json::to_vec(&list).expect("json")).expect("write");
            self.apply(&file);
        }
    }

    /// Runs the real clusterctl with this control plane as its KUBECONFIG (and a HOME of its
    /// own), without blocking the test's runtime: the simulator and capms' webhooks answer while
    /// it runs.
    pub async fn clusterctl(&self, args: &[&str]) -> std::process::Output {
        self.clusterctl_with(args, &[]).await
    }

    /// [`Self::clusterctl`] with the environment variables `env` (a template's variables).
    pub async fn clusterctl_with(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> std::process::Output {
        let home = tempfile::tempdir().expect("home");
        tokio::process::Command::from(clusterctl_command())
            .args(args)
            .envs(env.iter().copied())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", home.path())
            .output()
            .await
            .expect("clusterctl runs")
    }
}
