#!/usr/bin/env bash
# Regenerates go.mod/go.sum of the wrapper module that builds the real Kubernetes
# binaries from the Go module proxy. Run only when changing the Kubernetes version;
# the result is committed so builds are reproducible.
#
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
# local paths, which only works inside its own repository. This module replaces
# each of them with its published v0.<minor>.<patch> tag instead.
set -euo pipefail
K8S=${K8S:-1.36.3}
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
rm -f go.mod go.sum
go mod init capms.invalid/tests/k8s
go mod edit -go=1.26.0
upstream_gomod=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$K8S" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$upstream_gomod"); do
  go mod edit -replace="$m=$m@v0.${K8S#1.}"
done
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S"
go get -tool "k8s.io/kubernetes/cmd/kube-controller-manager@v$K8S"
go get -tool "k8s.io/kubernetes/cmd/kubectl@v$K8S"
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
go get -tool "go.etcd.io/etcd/server/v3@$etcd_version"
go mod tidy
echo "wrapper pinned to kubernetes v$K8S, etcd $etcd_version"
