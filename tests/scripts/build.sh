#!/usr/bin/env bash
# Builds the real Kubernetes and Cluster API binaries that the tests and the demo run,
# from the Go module proxy, into a version-keyed cache outside the repository.
# Idempotent: a binary already in the cache is not rebuilt. Prints the cache's bin dir
# on the last line of stdout; progress goes to stderr.
#
#   tests/scripts/build.sh            # everything the tests need
#   tests/scripts/build.sh k8s        # only etcd, kube-apiserver, kube-controller-manager, kubectl
#   tests/scripts/build.sh metalgo    # only the metal-go check program (tests/go/metalgo)
#   CAPMS_CACHE=/some/dir ...     # cache root (default ~/.cache/capms)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
go_dir="$here/../go"
# The Go module that pins Kubernetes and etcd (tests/go/k8s) is where their versions are read
# and their commands built.
cd "$go_dir/k8s"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
# The binaries are stripped (-s -w), so the debug information the compiler would emit is thrown
# away at link time; not emitting it saves about a tenth of a cold build.
nodwarf=-gcflags=all=-dwarf=false
CAPI_VERSION=${CAPI_VERSION:-v1.13.6}
cache=${CAPMS_CACHE:-$HOME/.cache/capms}
# One build at a time per cache: a second caller (a test binary, `make test` while CI's early
# start still builds) waits for the first, then finds what it built.
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9

progress() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# metal-stack's own Go client (metal-go) driving the simulator: tests/go/metalgo, a module of its own.
# The checksum database does not answer for github.com/metal-stack modules here, so GONOSUMDB
# skips it; go.sum still pins every module (-mod=readonly refuses anything it does not pin).
# Cached by the hash of the program and its module files.
build_metalgo() {
  local src="$go_dir/metalgo" key out
  key=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)
  out="$cache/metalgo-$key/metalgo-check"
  if [ ! -x "$out" ]; then
    progress "building the metal-go check program (metal-go from the Go module proxy)"
    local start=$SECONDS
    mkdir -p "$(dirname "$out")"
    (cd "$src" && GONOSUMDB=github.com/metal-stack GOFLAGS=-mod=readonly \
      go build -trimpath "$nodwarf" -ldflags "-s -w" -o "$out.partial" .)
    mv "$out.partial" "$out"
    progress "built metalgo-check in $((SECONDS - start)) s"
  fi
  metalgo_bin=$out
}
build_metalgo
if [ "${1:-all}" = metalgo ]; then
  echo "CAPMS_METALGO=$metalgo_bin" > "$cache/env-metalgo.sh"
  echo "$cache/env-metalgo.sh"
  exit 0
fi
k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
k8s_dir="$cache/k8s-$k8s_version-etcd-$etcd_version"
capi_dir="$cache/capi-$CAPI_VERSION"
mkdir -p "$k8s_dir" "$capi_dir"

minor=$(echo "$k8s_version" | cut -d. -f2)
commit=$(go mod download -json "k8s.io/kubernetes@$k8s_version" \
  | python3 -c 'import json,sys; print((json.load(sys.stdin).get("Origin") or {}).get("Hash",""))')
# Without these the binaries report v0.0.0-master+$Format:%H$ as their version.
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ldflags="$ldflags -X $p.gitTreeState=clean -X $p.gitCommit=$commit -X $p.buildDate=1970-01-01T00:00:00Z"
done

build_k8s() { # name package
  local out="$k8s_dir/$1"
  [ -x "$out" ] && return 0
  progress "building $1 $k8s_version (cold builds take several minutes)"
  local start=$SECONDS
  go build -trimpath "$nodwarf" -pgo=off -tags selinux,notest -ldflags "$ldflags" -o "$out.partial" "$2"
  mv "$out.partial" "$out"
  progress "built $1 in $((SECONDS - start)) s"
}

# The node stand-in's kubelet port-forward server (tests/go/kubelet: the kubelet's own streaming
# library), cached by the hash of the program and its module files.
build_kubelet() {
  local src="$go_dir/kubelet" key out
  key=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)
  out="$cache/kubelet-stand-in-$key/kubelet-stand-in"
  if [ ! -x "$out" ]; then
    progress "building the kubelet stand-in (k8s.io/cri-streaming from the Go module proxy)"
    mkdir -p "$(dirname "$out")"
    (cd "$src" && GOFLAGS=-mod=readonly go build -trimpath "$nodwarf" -ldflags "-s -w" -o "$out.partial" .)
    mv "$out.partial" "$out"
  fi
  kubelet_bin=$out
}
build_kubelet

build_k8s etcd go.etcd.io/etcd/server/v3
build_k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build_k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build_k8s kubectl k8s.io/kubernetes/cmd/kubectl

# Written aside and renamed into place: control planes starting at the same time (one test
# binary starts several) source this file while another run rewrites it, and a half-written
# file left CAPMS_K8S_BIN unset.
write_env() {
  local file="$cache/env-$1.sh"
  cat > "$file.$$" <<ENV
CAPMS_K8S_BIN=$k8s_dir
CAPMS_CAPI_BIN=$capi_dir
CAPMS_K8S_VERSION=$k8s_version
CAPMS_CAPI_VERSION=$CAPI_VERSION
CAPMS_METALCTL=${metalctl_dir:-}/metalctl
CAPMS_CERT_MANAGER=${cm_dir:-}
CAPMS_CERT_MANAGER_BIN=${cm_bin_dir:-}
CAPMS_METALGO=$metalgo_bin
CAPMS_KUBELET=$kubelet_bin
ENV
  mv "$file.$$" "$file"
  echo "$file"
}
if [ "${1:-all}" = k8s ]; then
  write_env k8s
  exit 0
fi

install_capi() { # name package
  local out="$capi_dir/$1"
  [ -x "$out" ] && return 0
  progress "building $1 (Cluster API $CAPI_VERSION)"
  local start=$SECONDS tmp
  tmp=$(mktemp -d)
  GOBIN="$tmp" GOFLAGS= go install -trimpath "$nodwarf" -ldflags "-s -w" "$2@$CAPI_VERSION"
  mv "$tmp"/* "$out"
  rmdir "$tmp"
  progress "built $1 in $((SECONDS - start)) s"
}

install_capi cluster-api-manager sigs.k8s.io/cluster-api
install_capi kubeadm-bootstrap-manager sigs.k8s.io/cluster-api/bootstrap/kubeadm
install_capi kubeadm-control-plane-manager sigs.k8s.io/cluster-api/controlplane/kubeadm
install_capi clusterctl sigs.k8s.io/cluster-api/cmd/clusterctl

# metalctl, to look at the simulator as an operator would. The Go module proxy reachable here
# refuses every github.com/metal-stack module (403 "This module version is not available"), so
# a failure is reported, not fatal; where the proxy serves it, it is built and cached.
METALCTL_VERSION=${METALCTL_VERSION:-v0.18.8}
metalctl_dir="$cache/metalctl-$METALCTL_VERSION"
if [ ! -x "$metalctl_dir/metalctl" ]; then
  progress "building metalctl $METALCTL_VERSION"
  if out=$(GOBIN="$metalctl_dir" GOFLAGS= go install "github.com/metal-stack/metalctl@$METALCTL_VERSION" 2>&1); then
    progress "built metalctl"
  else
    progress "metalctl $METALCTL_VERSION cannot be built here: $(echo "$out" | tail -2 | tr '\n' ' ')"
  fi
fi

# cert-manager's CRDs (plain YAML in its module), so install tests can apply our Issuer and
# Certificate.
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-v1.21.2}
cm_dir="$cache/cert-manager-$CERT_MANAGER_VERSION"
if [ ! -d "$cm_dir/crd" ]; then
  progress "fetching cert-manager $CERT_MANAGER_VERSION CRDs"
  src=$(GOFLAGS= go mod download -json "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$cm_dir/crd.partial"
  cp "$src"/deploy/crds/*.yaml "$cm_dir/crd.partial/"
  chmod -R u+w "$cm_dir/crd.partial"
  mv "$cm_dir/crd.partial" "$cm_dir/crd"
fi

# cert-manager's controller and cainjector, built through their own wrapper module
# (tests/go/cert-manager: v1.11.5's go.mod has a replace directive, so go install refuses it).
cm_bin=$(cd "$go_dir/cert-manager" && go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)
cm_bin_dir="$cache/cert-manager-$cm_bin"
mkdir -p "$cm_bin_dir"
for cmd in controller cainjector; do
  [ -x "$cm_bin_dir/$cmd" ] && continue
  progress "building cert-manager $cmd $cm_bin"
  start=$SECONDS
  (cd "$go_dir/cert-manager" && go build -trimpath "$nodwarf" -ldflags "-s -w" -o "$cm_bin_dir/$cmd.partial" "github.com/cert-manager/cert-manager/cmd/$cmd")
  mv "$cm_bin_dir/$cmd.partial" "$cm_bin_dir/$cmd"
  progress "built cert-manager $cmd in $((SECONDS - start)) s"
done

# CAPI's CRDs ship inside its module zip; keep a copy next to the binaries.
if [ ! -d "$capi_dir/crd" ]; then
  src=$(GOFLAGS= go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$capi_dir/crd.partial/core" "$capi_dir/crd.partial/bootstrap"
  cp "$src"/config/crd/bases/*.yaml "$capi_dir/crd.partial/core/"
  cp "$src"/bootstrap/kubeadm/config/crd/bases/*.yaml "$capi_dir/crd.partial/bootstrap/"
  cp -r "$src"/config/webhook "$capi_dir/crd.partial/core-webhook"
  cp -r "$src"/bootstrap/kubeadm/config/webhook "$capi_dir/crd.partial/bootstrap-webhook"
  chmod -R u+w "$capi_dir/crd.partial"
  mv "$capi_dir/crd.partial" "$capi_dir/crd"
fi

# The kubeadm control-plane provider's CRDs and webhooks (added after the others: a cache
# made before it lacks only these).
if [ ! -d "$capi_dir/crd/controlplane" ]; then
  src=$(GOFLAGS= go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$capi_dir/crd/controlplane.partial"
  cp "$src"/controlplane/kubeadm/config/crd/bases/*.yaml "$capi_dir/crd/controlplane.partial/"
  cp -r "$src"/controlplane/kubeadm/config/webhook "$capi_dir/crd/controlplane-webhook.partial"
  chmod -R u+w "$capi_dir/crd/controlplane.partial" "$capi_dir/crd/controlplane-webhook.partial"
  mv "$capi_dir/crd/controlplane-webhook.partial" "$capi_dir/crd/controlplane-webhook"
  mv "$capi_dir/crd/controlplane.partial" "$capi_dir/crd/controlplane"
fi

# clusterctl's own inventory CRD (Provider), which `clusterctl init` installs: the move test
# records its providers the way init would.
if [ ! -f "$capi_dir/crd/clusterctl/clusterctl-api.yaml" ]; then
  src=$(GOFLAGS= go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$capi_dir/crd/clusterctl.partial"
  cp "$src"/cmd/clusterctl/config/manifest/clusterctl-api.yaml "$capi_dir/crd/clusterctl.partial/"
  chmod -R u+w "$capi_dir/crd/clusterctl.partial"
  mv "$capi_dir/crd/clusterctl.partial" "$capi_dir/crd/clusterctl"
fi

# Cluster API's metadata.yaml (release series to contract): clusterctl reads the management
# cluster's contract from the core provider's repository, which the upgrade test makes locally.
if [ ! -f "$capi_dir/metadata.yaml" ]; then
  src=$(GOFLAGS= go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  cp "$src/metadata.yaml" "$capi_dir/metadata.yaml.partial"
  chmod u+w "$capi_dir/metadata.yaml.partial"
  mv "$capi_dir/metadata.yaml.partial" "$capi_dir/metadata.yaml"
fi

progress "all binaries present"
write_env all
