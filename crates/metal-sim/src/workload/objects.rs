//! The objects `kubeadm init` uploads that Cluster API's kubeadm providers read: the cluster's
//! configuration (`kube-system/kubeadm-config`, whose presence is what the kubeadm control-plane
//! provider takes as "initialized"), the kubelet's (`kube-system/kubelet-config`) and the
//! discovery data joining machines find (`kube-public/cluster-info`).

use super::bootstrap::{HostPort, Init};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// The field manager of everything the stand-in's `kubeadm init` writes.
const MANAGER: &str = "kubeadm";

/// Applies kubeadm init's ConfigMaps (idempotent).
pub async fn upload(
    workload: &kube::Client,
    init: &Init,
    endpoint: &HostPort,
    ca_pem: &str,
) -> Result<(), kube::Error> {
    let cluster_configuration = serde_saphyr::to_string(&init.cluster_configuration)
        .unwrap_or_else(|_| init.cluster_configuration.to_string());
    apply(
        workload,
        "kube-system",
        "kubeadm-config",
        json!({"ClusterConfiguration": cluster_configuration}),
    )
    .await?;
    let kubelet = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                   cgroupDriver: systemd\nclusterDNS: []\n";
    apply(
        workload,
        "kube-system",
        "kubelet-config",
        json!({"kubelet": kubelet}),
    )
    .await?;
    apply(
        workload,
        "kube-public",
        "cluster-info",
        json!({"kubeconfig": discovery_kubeconfig(endpoint, ca_pem)}),
    )
    .await
}

async fn apply(
    workload: &kube::Client,
    namespace: &str,
    name: &str,
    data: serde_json::Value,
) -> Result<(), kube::Error> {
    let map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    });
    Api::<ConfigMap>::namespaced(workload.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(map),
        )
        .await
        .map(|_| ())
}

/// A kubeconfig with the cluster's endpoint and CA and no user, as `cluster-info` holds it.
fn discovery_kubeconfig(endpoint: &HostPort, ca_pem: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    \
         certificate-authority-data: {ca}\n    server: https://{endpoint}\n\
         contexts: []\nusers: []\ncurrent-context: \"\"\n"
    )
}

/// The `kubernetesVersion` of the cluster's `kubeadm-config`: what `kubeadm join` installs (the
/// control-plane provider raises it before an upgrade's first new machine).
pub async fn kubernetes_version(workload: &kube::Client) -> Option<String> {
    let map = Api::<ConfigMap>::namespaced(workload.clone(), "kube-system")
        .get_opt("kubeadm-config")
        .await
        .ok()??;
    let text = map.data?.get("ClusterConfiguration")?.clone();
    let config: serde_json::Value = serde_saphyr::from_str(&text).ok()?;
    config["kubernetesVersion"].as_str().map(str::to_owned)
}
