//! The real clusterctl against a test's control plane, and the provider inventory `clusterctl
//! init` leaves behind (which `clusterctl move` reads on both sides).

use super::*;

/// A provider as `clusterctl init` records it: its inventory name, type, namespace and the
/// directory of its CRDs.
struct Installed {
    name: &'static str,
    provider_name: &'static str,
    kind: &'static str,
    namespace: &'static str,
    version: String,
    crds: PathBuf,
}

fn installed() -> [Installed; 3] {
    let capi = binaries().capi.join("crd");
    let capi_version = capi_version();
    [
        Installed {
            name: "cluster-api",
            provider_name: "cluster-api",
            kind: "CoreProvider",
            namespace: "capi-system",
            version: capi_version.clone(),
            crds: capi.join("core"),
        },
        Installed {
            name: "bootstrap-kubeadm",
            provider_name: "kubeadm",
            kind: "BootstrapProvider",
            namespace: "capi-kubeadm-bootstrap-system",
            version: capi_version,
            crds: capi.join("bootstrap"),
        },
        Installed {
            name: "infrastructure-metal-stack",
            provider_name: "metal-stack",
            kind: "InfrastructureProvider",
            namespace: "capms-system",
            version: format!("v{}", env!("CARGO_PKG_VERSION")),
            crds: repo_root().join("manifests/crd"),
        },
    ]
}

/// Cluster API's release, from the name of its cache directory (`capi-<version>`).
fn capi_version() -> String {
    binaries()
        .capi
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("capi-"))
        .expect("the CAPI cache directory is named capi-<version>")
        .to_owned()
}

impl ControlPlane {
    /// Records Cluster API core, the kubeadm bootstrap provider and capms as `clusterctl init`
    /// does: clusterctl's inventory CRD, a Provider object per provider in its namespace, and
    /// the `clusterctl.cluster.x-k8s.io` and provider labels on every CRD (clusterctl move
    /// discovers the kinds it moves by that label).
    pub fn record_clusterctl_inventory(&self) {
        self.apply(&binaries().capi.join("crd/clusterctl"));
        self.wait_crds_established();
        for p in installed() {
            let provider_label = format!("cluster.x-k8s.io/provider={}", p.name);
            self.kubectl(
                &[
                    "label",
                    "--overwrite",
                    "clusterctl.cluster.x-k8s.io=",
                    &provider_label,
                    "-f",
                ],
                std::slice::from_ref(&p.crds),
            );
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
        tokio::process::Command::new(binaries().capi.join("clusterctl"))
            .args(args)
            .envs(env.iter().copied())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", home.path())
            .output()
            .await
            .expect("clusterctl runs")
    }
}
