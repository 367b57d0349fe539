#!/usr/bin/env bash
# The whole flow on this machine, for a newcomer:
#   demo.sh up     build what is missing, start a real control plane, the metal-api simulator
#                  (with its node stand-in), capms (controllers and webhooks), the Cluster API
#                  core manager and the kubeadm bootstrap and control-plane providers, apply a
#                  cluster rendered by clusterctl from cluster-template.yaml (one control-plane
#                  machine, two workers) and wait until every Machine is Running
#   demo.sh down   stop exactly what `up` started
# Everything listens on 127.0.0.1; state lives in .demo/ of the repository.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
state="$root/.demo"
cmd=${1:-up}

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

if [ "$cmd" = down ]; then
  if [ -f "$state/pids" ]; then
    for pid in $(tac "$state/pids"); do kill -TERM "$pid" 2>/dev/null || true; done
    sleep 1
    for pid in $(cat "$state/pids"); do kill -KILL "$pid" 2>/dev/null || true; done
  fi
  [ -d "$state/cp" ] && bash "$root/tests/scripts/controlplane.sh" stop "$state/cp"
  rm -rf "$state"
  echo "demo stopped"
  exit 0
fi
[ "$cmd" = up ] || { echo "usage: $0 up|down" >&2; exit 2; }
api=${CAPMS_DEMO_API:-v1}
case "$api" in v1 | v2) ;; *) echo "API=$api: valid are v1 (metal-api) and v2 (metal-apiserver)" >&2; exit 2 ;; esac
if [ "$api" = v2 ] && [ "${CAPMS_DEMO_TEMPLATE:-}" = go-provider ]; then
  echo "API=v2 with TEMPLATE=go-provider: the Go provider's v1alpha1 API has no credentialsRef to name a token with" >&2; exit 2
fi
[ -f "$state/pids" ] && { echo "a demo runs already (.demo/pids); run 'make demo-down' first" >&2; exit 1; }
started=$SECONDS

say "building what is missing (a cold build of Kubernetes and Cluster API takes about 10 minutes)"
# shellcheck disable=SC1090
source "$(bash "$root/tests/scripts/build.sh")"
(cd "$root" && cargo build --locked --bin capms --bin metal-sim)
capms="$root/target/debug/capms"
metal_sim="$root/target/debug/metal-sim"
kubectl="$CAPMS_K8S_BIN/kubectl"

say "starting the control plane (etcd, kube-apiserver, kube-controller-manager)"
mkdir -p "$state"
: > "$state/pids"
bash "$root/tests/scripts/controlplane.sh" start "$state/cp" >/dev/null
export KUBECONFIG="$state/cp/kubeconfig"
# clusterctl would otherwise ask GitHub for its latest release after every command.
export CLUSTERCTL_DISABLE_VERSIONCHECK=true

free_port() { python3 "$root/tests/scripts/free_ports.py"; }
start() { # name command...
  local name=$1; shift
  nohup "$@" >"$state/$name.log" 2>&1 </dev/null &
  echo $! >>"$state/pids"
}
wait_ready() { # url what
  for _ in $(seq 1 120); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "$2 did not become ready; see $state/*.log" >&2; exit 1
}

say "starting the metal-api simulator (mini-lab inventory on 127.0.0.0/8) and its node stand-in"
sim_port=$(free_port)
start metal-sim "$metal_sim" --listen "127.0.0.1:$sim_port" --base-path /metal \
  --workloads "$state/workloads" --kube-bin "$CAPMS_K8S_BIN" --kubelet "$CAPMS_KUBELET"
export METAL_API_URL="http://127.0.0.1:$sim_port/metal" METAL_API_HMAC=metal-edit METAL_API_HMAC_AUTH_TYPE=Metal-Edit
wait_ready "http://127.0.0.1:$sim_port/metal/v1/health" "the simulator"

say "installing CRDs (capms, Cluster API core, kubeadm bootstrap and control plane)"
# capms's conversion webhook (v1alpha1, the Go provider's API) is the manager's, on loopback.
capms_webhook=$(free_port)
bash "$root/certs/make-local-certs.sh" "$state/cp/pki" "$state/certs/capms"
"$capms" crds --conversion-url "https://127.0.0.1:$capms_webhook" --ca-file "$state/cp/pki/ca.crt" |
  "$kubectl" apply --server-side -f - >/dev/null
"$kubectl" apply --server-side -f "$CAPMS_CAPI_BIN/crd/core" >/dev/null
for p in bootstrap controlplane; do
  "$kubectl" apply --server-side -f "$CAPMS_CAPI_BIN/crd/$p" >/dev/null
  # The contract labels Cluster API's kustomization adds: core finds a provider's version by them.
  "$kubectl" label --overwrite -f "$CAPMS_CAPI_BIN/crd/$p" cluster.x-k8s.io/v1beta1=v1beta1 cluster.x-k8s.io/v1beta2=v1beta2 >/dev/null
done
"$kubectl" wait --for=condition=Established --timeout=60s crd --all >/dev/null

say "starting the Cluster API core manager and the kubeadm bootstrap and control-plane providers"
# Each manager's webhooks, pointed at it on loopback.
register_webhooks() { # name port manifests
  "$kubectl" create --dry-run=client -o json -f "$3" | python3 -c '
import base64, json, sys
name, port, ca = sys.argv[1], sys.argv[2], base64.b64encode(open(sys.argv[3], "rb").read()).decode()
text, decoder, pos, items = sys.stdin.read(), json.JSONDecoder(), 0, []
while pos < len(text):
    if text[pos].isspace():
        pos += 1
        continue
    item, pos = decoder.raw_decode(text, pos)
    items.extend(item.get("items", [item]))
for item in items:
    for w in item.get("webhooks", []):
        path = w["clientConfig"]["service"]["path"]
        w["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
    item["metadata"]["name"] = name + "-" + item["metadata"]["name"]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))' "$1" "$2" "$state/cp/pki/ca.crt" | "$kubectl" apply -f - >/dev/null
}
start_capi() { # name binary webhooks-dir [flags...]
  local name=$1 binary=$2 webhooks=$3 webhook health
  shift 3
  webhook=$(free_port); health=$(free_port)
  bash "$root/certs/make-local-certs.sh" "$state/cp/pki" "$state/certs/$name"
  start "$name" "$CAPMS_CAPI_BIN/$binary" --kubeconfig="$KUBECONFIG" \
    --webhook-port="$webhook" --webhook-cert-dir="$state/certs/$name" --health-addr="127.0.0.1:$health" \
    --diagnostics-address="127.0.0.1:$(free_port)" --insecure-diagnostics --leader-elect=false "$@"
  wait_ready "http://127.0.0.1:$health/readyz" "$name"
  register_webhooks "$name" "$webhook" "$CAPMS_CAPI_BIN/crd/$webhooks/manifests.yaml"
}
start_capi cluster-api cluster-api-manager core-webhook
# Ignition bootstrap data (cluster-template-ignition.yaml) needs this gate in both kubeadm providers.
ignition=--feature-gates=KubeadmBootstrapFormatIgnition=true
start_capi kubeadm-bootstrap kubeadm-bootstrap-manager bootstrap-webhook "$ignition"
start_capi kubeadm-control-plane kubeadm-control-plane-manager controlplane-webhook "$ignition"

say "starting capms (controllers, webhooks)"
capms_health=$(free_port); capms_metrics=$(free_port)
start capms "$capms" manager --kubeconfig="$KUBECONFIG" --webhook-host=127.0.0.1 --webhook-port="$capms_webhook" \
  --webhook-cert-dir="$state/certs/capms" --health-addr="127.0.0.1:$capms_health" --metrics-addr="127.0.0.1:$capms_metrics"
wait_ready "http://127.0.0.1:$capms_health/readyz" "capms"
"$capms" webhooks --url "https://127.0.0.1:$capms_webhook" --ca-file "$state/cp/pki/ca.crt" | "$kubectl" apply -f - >/dev/null

"$kubectl" create namespace demo >/dev/null
if [ "${CAPMS_DEMO_TEMPLATE:-}" = go-provider ]; then
  go_template=${CAPMS_GO_TEMPLATE:-$root/../shared/reference/capms-v0.8.0/clusterctl-templates/cluster-template.yaml}
  [ -f "$go_template" ] || { echo "TEMPLATE=go-provider needs the Go provider's cluster-template.yaml (v0.8.0); give its path in CAPMS_GO_TEMPLATE (not found: $go_template)" >&2; exit 1; }
  # metal-stack's Go provider's own template (v0.8.0), applied unchanged: its v1alpha1 objects
  # go through capms's conversion webhook. Its control-plane IP is a static IP made beforehand;
  # the simulator's inventory has one (127.100.0.142, "pre-reserved").
  say "rendering the Go provider's cluster-template.yaml with clusterctl and applying it: one control-plane machine, two workers"
  METAL_PARTITION=mini-lab METAL_PROJECT_ID=00000000-0000-0000-0000-000000000001 \
  FIREWALL_MACHINE_SIZE=v1-small-x86 FIREWALL_MACHINE_IMAGE=firewall-ubuntu-3.0 \
  FIREWALL_EXTERNAL_NETWORKS='[internet-mini-lab]' CONTROL_PLANE_IP=127.100.0.142 \
  CONTROL_PLANE_MACHINE_SIZE=v1-small-x86 CONTROL_PLANE_MACHINE_IMAGE=capms-ubuntu-1.33.5 \
  WORKER_MACHINE_SIZE=v1-small-x86 WORKER_MACHINE_IMAGE=capms-ubuntu-1.33.5 HOME="$state" \
    "$CAPMS_CAPI_BIN/clusterctl" generate cluster demo \
    --from "$go_template" \
    --kubernetes-version v1.33.5 --control-plane-machine-count 1 --worker-machine-count 2 \
    --target-namespace demo > "$state/cluster.yaml"
else
  say "rendering cluster-template.yaml with clusterctl and applying it: one control-plane machine, two workers"
  # A free address of the public network (internet-mini-lab, 127.100.0.0/24) for the API server:
  # capms reserves it, kube-vip on the control-plane machine announces it.
  METAL_PARTITION=mini-lab METAL_PROJECT_ID=00000000-0000-0000-0000-000000000001 \
  METAL_PUBLIC_NETWORK_ID=internet-mini-lab CONTROL_PLANE_IP=127.100.0.250 \
  METAL_CONTROL_PLANE_IMAGE=ubuntu-26.4 METAL_WORKER_IMAGE=ubuntu-26.4 HOME="$state" \
    "$CAPMS_CAPI_BIN/clusterctl" generate cluster demo --from "$root/manifests/clusterctl/cluster-template.yaml" \
    --kubernetes-version v1.33.5 --control-plane-machine-count 1 --worker-machine-count 2 \
    --target-namespace demo > "$state/cluster.yaml"
fi
if [ "$api" = v2 ]; then
  say "giving the cluster a metal-apiserver project token (API v2) in Secret demo/metal-v2"
  # The token an operator creates for capms (`capms token-request` prints the request: editor
  # of the project, allowed the methods of visibility SELF capms calls), minted by the simulator
  # as metal-apiserver's TokenService/Create would; it lives 8 hours and capms refreshes it.
  minted=$("$capms" token-request --project 00000000-0000-0000-0000-000000000001 |
    curl -sf -H 'Content-Type: application/json' "http://127.0.0.1:$sim_port/sim/v2/tokens" -d @-)
  "$kubectl" create secret generic metal-v2 -n demo --from-literal=apiVersion=v2 \
    --from-literal=url="http://127.0.0.1:$sim_port" --from-literal=project=00000000-0000-0000-0000-000000000001 \
    --from-literal=token="$(printf '%s' "$minted" | jq -r .secret)" >/dev/null
  "$kubectl" label secret metal-v2 -n demo clusterctl.cluster.x-k8s.io/move= >/dev/null
  # The MetalStackCluster names it; everything of the cluster then goes through API v2.
  awk '/^kind: MetalStackCluster$/ { msc = 1 } /^---/ { msc = 0 }
       { print } msc && /^spec:$/ { print "  credentialsRef:\n    name: metal-v2"; msc = 0 }' \
    "$state/cluster.yaml" > "$state/cluster-v2.yaml"
  mv "$state/cluster-v2.yaml" "$state/cluster.yaml"
fi
"$kubectl" apply --server-side -f "$state/cluster.yaml"

say "waiting for every Machine to be Running with its Node"
phases() { "$kubectl" get -n demo machines -o jsonpath='{range .items[*]}{.status.phase}/{.status.nodeRef.name}{" "}{end}' 2>/dev/null; }
for i in $(seq 1 240); do
  p=$(phases)
  printf '  %3ss  machines: %s\n' "$((SECONDS - started))" "${p:-…}"
  running=$(echo "$p" | tr ' ' '\n' | grep -c '^Running/.' || true)
  [ "$running" = 3 ] && break
  [ "$i" = 240 ] && { echo "not running after 20 minutes; logs in $state/" >&2; exit 1; }
  sleep 5
done

say "what Kubernetes shows"
"$kubectl" get cluster,kubeadmcontrolplane,machines,metalstackclusters,metalstackmachines,metalstackfirewalls -n demo
if [ "${CAPMS_DEMO_TEMPLATE:-}" = go-provider ]; then
  say "the same cluster as the Go provider's API shows it"
  "$kubectl" get metalstackclusters.v1alpha1.infrastructure.cluster.x-k8s.io,metalstackfirewalldeployments -n demo
fi
say "the workload cluster's nodes (its API at the control-plane IP, served by the node stand-in)"
workload_kubeconfig="$state/workloads/demo.demo/admin.conf"
"$kubectl" --kubeconfig "$workload_kubeconfig" get nodes -o wide
if [ "${CAPMS_DEMO_TEMPLATE:-}" != go-provider ]; then  # the Go provider's template ships no metal-ccm
  say "metal-ccm in the workload cluster (applied by Cluster API's ClusterResourceSet; no pod runs in the stand-in)"
  for _ in $(seq 1 60); do
    "$kubectl" --kubeconfig "$workload_kubeconfig" -n kube-system get deployment cloud-controller-manager >/dev/null 2>&1 && break
    sleep 1
  done
  "$kubectl" --kubeconfig "$workload_kubeconfig" -n kube-system get deployment/cloud-controller-manager secret/cloud-controller-manager
fi
say "what metal-api shows (the machines)"
if [ -x "${CAPMS_METALCTL:-}" ]; then
  METALCTL_API_URL="$METAL_API_URL" METALCTL_HMAC=metal-admin "$CAPMS_METALCTL" machine ls
else
  # metalctl cannot be built from the Go module proxy reachable here; capms lists them instead.
  "$capms" metal machines
fi

say "ready after $((SECONDS - started)) s; the environment keeps running"
cat <<EOF
  export KUBECONFIG=$KUBECONFIG
  kubectl --kubeconfig $workload_kubeconfig get nodes      # the workload cluster
  export METAL_API_URL=$METAL_API_URL METAL_API_HMAC=metal-edit   # capms metal machines
  export METALCTL_API_URL=$METAL_API_URL METALCTL_HMAC=metal-admin # metalctl, where it can be built
  logs: $state/*.log        stop everything: make demo-down
  # (capms's template) roll the firewall to new rules; the new one takes over before the old one goes:
  kubectl -n demo patch msc demo --type=merge -p '{"spec":{"firewallSpec":{"rules":{"egress":[{"protocol":"tcp","ports":[443,8443],"to":["0.0.0.0/0"]}]}}}}' && kubectl -n demo get msc,msfw -w
EOF
if [ "$api" = v2 ]; then
  echo "  # the cluster reaches metal-stack through API v2: kubectl -n demo get secret metal-v2 (url http://127.0.0.1:$sim_port)"
fi
