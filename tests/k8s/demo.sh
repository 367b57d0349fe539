#!/usr/bin/env bash
# The whole flow on this machine, for a newcomer:
#   demo.sh up     build what is missing, start a real control plane, the metal-api simulator,
#                  capms (controllers and webhooks), the Cluster API core manager and kubeadm
#                  bootstrap provider, apply a cluster with two workers, and wait until it is ready
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
  [ -d "$state/cp" ] && bash "$root/tests/k8s/controlplane.sh" stop "$state/cp"
  rm -rf "$state"
  echo "demo stopped"
  exit 0
fi
[ "$cmd" = up ] || { echo "usage: $0 up|down" >&2; exit 2; }
[ -f "$state/pids" ] && { echo "a demo runs already (.demo/pids); run 'make demo-down' first" >&2; exit 1; }
started=$SECONDS

say "building what is missing (a cold build of Kubernetes and Cluster API takes about 10 minutes)"
# shellcheck disable=SC1090
source "$(bash "$root/tests/k8s/build.sh")"
(cd "$root" && cargo build --locked --bin capms)
capms="$root/target/debug/capms"
kubectl="$CAPMS_K8S_BIN/kubectl"

say "starting the control plane (etcd, kube-apiserver, kube-controller-manager)"
mkdir -p "$state"
: > "$state/pids"
bash "$root/tests/k8s/controlplane.sh" start "$state/cp" >/dev/null
export KUBECONFIG="$state/cp/kubeconfig"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() { # name command...
  local name=$1; shift
  nohup "$@" >"$state/$name.log" 2>&1 </dev/null &
  echo $! >>"$state/pids"
}
wait_ready() { # url what
  for _ in $(seq 1 120); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "$2 did not become ready; see $state/*.log" >&2; exit 1
}

say "starting the metal-api simulator (mini-lab inventory on 127.0.0.0/8)"
sim_port=$(free_port)
start metal-sim "$capms" metal-sim --listen "127.0.0.1:$sim_port" --base-path /metal
export METAL_API_URL="http://127.0.0.1:$sim_port/metal" METAL_API_HMAC=metal-edit METAL_API_HMAC_AUTH_TYPE=Metal-Edit
wait_ready "http://127.0.0.1:$sim_port/metal/v1/health" "the simulator"

say "installing CRDs (capms, Cluster API core and kubeadm bootstrap)"
"$kubectl" apply --server-side -f "$root/manifests/crd" >/dev/null
"$kubectl" apply --server-side -f "$CAPMS_CAPI_BIN/crd/core" >/dev/null
"$kubectl" apply --server-side -f "$CAPMS_CAPI_BIN/crd/bootstrap" >/dev/null
"$kubectl" wait --for=condition=Established --timeout=60s crd --all >/dev/null

say "starting the Cluster API core manager and kubeadm bootstrap provider"
for c in capi cabpk capms; do bash "$root/certs/make-local-certs.sh" "$state/cp/pki" "$state/certs/$c"; done
capi_webhook=$(free_port); capi_health=$(free_port)
start cluster-api "$CAPMS_CAPI_BIN/cluster-api-manager" --kubeconfig="$KUBECONFIG" \
  --webhook-port="$capi_webhook" --webhook-cert-dir="$state/certs/capi" --health-addr="127.0.0.1:$capi_health" \
  --diagnostics-address="127.0.0.1:$(free_port)" --insecure-diagnostics --leader-elect=false
start kubeadm-bootstrap "$CAPMS_CAPI_BIN/kubeadm-bootstrap-manager" --kubeconfig="$KUBECONFIG" \
  --webhook-port="$(free_port)" --webhook-cert-dir="$state/certs/cabpk" --health-addr="127.0.0.1:$(free_port)" \
  --diagnostics-address="127.0.0.1:$(free_port)" --insecure-diagnostics --leader-elect=false
wait_ready "http://127.0.0.1:$capi_health/readyz" "the Cluster API manager"
# Cluster API's own webhooks, pointed at its manager on loopback.
"$kubectl" create --dry-run=client -o json -f "$CAPMS_CAPI_BIN/crd/core-webhook/manifests.yaml" \
  | python3 -c '
import base64, json, sys
port, ca = sys.argv[1], base64.b64encode(open(sys.argv[2], "rb").read()).decode()
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
    item["metadata"]["name"] = "capi-" + item["metadata"]["name"]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))' "$capi_webhook" "$state/cp/pki/ca.crt" | "$kubectl" apply -f - >/dev/null

say "starting capms (controllers, webhooks)"
capms_webhook=$(free_port); capms_health=$(free_port); capms_metrics=$(free_port)
start capms "$capms" manager --kubeconfig="$KUBECONFIG" --webhook-host=127.0.0.1 --webhook-port="$capms_webhook" \
  --webhook-cert-dir="$state/certs/capms" --health-addr="127.0.0.1:$capms_health" --metrics-addr="127.0.0.1:$capms_metrics"
wait_ready "http://127.0.0.1:$capms_health/readyz" "capms"
"$capms" webhooks --url "https://127.0.0.1:$capms_webhook" --ca-file "$state/cp/pki/ca.crt" | "$kubectl" apply -f - >/dev/null

say "applying the demo cluster (manifests/demo/cluster.yaml): a firewall and two workers"
"$kubectl" create namespace demo >/dev/null
"$kubectl" apply -f "$root/manifests/demo/cluster.yaml"

say "waiting for the MetalStackCluster, MetalStackFirewall and MetalStackMachines to be ready"
ready() { "$kubectl" get -n demo "$1" -o jsonpath='{range .items[*]}{.status.ready}{" "}{end}' 2>/dev/null; }
for i in $(seq 1 240); do
  c=$(ready metalstackclusters); f=$(ready metalstackfirewalls); m=$(ready metalstackmachines)
  printf '  %3ss  cluster: %-6s firewall: %-6s machines: %s\n' "$((SECONDS - started))" "${c:-…}" "${f:-…}" "${m:-…}"
  if [ "$c" = "true " ] && [ "$f" = "true " ] && [ "$m" = "true true " ]; then break; fi
  [ "$i" = 240 ] && { echo "not ready after 20 minutes; logs in $state/" >&2; exit 1; }
  sleep 5
done

say "what Kubernetes shows"
"$kubectl" get cluster,machines,metalstackclusters,metalstackmachines,metalstackfirewalls -A
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
  export METAL_API_URL=$METAL_API_URL METAL_API_HMAC=metal-edit   # capms metal machines
  export METALCTL_API_URL=$METAL_API_URL METALCTL_HMAC=metal-admin # metalctl, where it can be built
  logs: $state/*.log        stop everything: make demo-down
EOF
