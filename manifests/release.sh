#!/usr/bin/env bash
# Assembles the clusterctl release files into OUT_DIR (default out/release):
#   infrastructure-components.yaml  namespace, CRDs, RBAC, manager, webhooks, certificates
#   metadata.yaml                   release series → contract
#   cluster-template.yaml           a workload cluster (kubeadm control plane, firewall, workers)
#   cluster-template-ignition.yaml  the same with Ignition bootstrap data (--flavor ignition)
#   cluster-template-calico.yaml    the same with Calico through CAAPH (--flavor calico)
#   cluster-template-topology.yaml  a Cluster of the ClusterClass metal-stack-kubeadm (--flavor topology)
#   clusterclass-metal-stack-kubeadm.yaml  that class, which clusterctl adds while a namespace has none
# ${VAR} placeholders stay for clusterctl to substitute at install time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/out/release}
mkdir -p "$out"
{
  for f in "$root"/manifests/namespace.yaml "$root"/manifests/crd/*.yaml "$root"/manifests/rbac/*.yaml \
           "$root"/manifests/manager/*.yaml "$root"/webhooks/manifests.yaml "$root"/certs/certificate.yaml; do
    echo "---"
    sed '1{/^---$/d}' "$f"
  done
} > "$out/infrastructure-components.yaml"
cp "$root/manifests/clusterctl/metadata.yaml" "$out/metadata.yaml"
cp "$root"/manifests/clusterctl/cluster-template*.yaml "$root"/manifests/clusterctl/clusterclass-*.yaml "$out/"
echo "$out"
