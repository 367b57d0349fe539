#!/usr/bin/env bash
# Starts and stops a real local Kubernetes control plane: etcd, kube-apiserver and
# kube-controller-manager (garbage collector, namespace and ClusterRole aggregation
# controllers), all on free loopback ports, with their own PKI and data under DIR.
#
#   controlplane.sh start DIR [--owner-pid PID]   # prints KUBECONFIG=DIR/kubeconfig
#   controlplane.sh stop DIR [--purge]            # stops exactly what start started;
#                                                 # --purge also removes DIR
#   controlplane.sh restart-apiserver DIR [--compact]  # kube-apiserver killed and started
#                                                 # again; --compact compacts etcd meanwhile
#
# DIR/pids lists the processes start launched; stop ends those PIDs and nothing else. With
# --owner-pid a watchdog stops them as soon as that process is gone (a test binary that
# panicked or was killed leaves nothing behind).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR [--owner-pid PID]" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

log() { printf '[controlplane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

stop_pids() { # pids-file grace-tenths-of-a-second
  local file=$1 grace=${2:-50} pid
  [ -f "$file" ] || return 0
  # Reverse start order: controller-manager, apiserver, then etcd.
  for pid in $(tac "$file"); do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for _ in $(seq 1 "$grace"); do
    local alive=0
    for pid in $(cat "$file"); do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  for pid in $(cat "$file"); do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in $(cat "$file"); do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  rm -f "$file"
}

if [ "$cmd" = stop ]; then
  if [ -f "$dir/watchdog.pid" ]; then
    watchdog=$(cat "$dir/watchdog.pid")
    # The watchdog itself ends up here (it execs this script); it must not kill itself.
    [ "$watchdog" != "$$" ] && kill -TERM "$watchdog" 2>/dev/null || true
    rm -f "$dir/watchdog.pid"
  fi
  if [ "${3:-}" = --purge ]; then
    # The data goes away with DIR, so there is nothing to shut down gracefully for.
    stop_pids "$dir/pids" 0
    rm -rf "$dir"
  else
    stop_pids "$dir/pids"
  fi
  log "stopped the control plane in $dir"
  exit 0
fi
if [ "$cmd" = restart-apiserver ]; then
  # kube-apiserver (line 2 of DIR/pids) killed, as a crash or an OOM kill ends it, and started
  # again with its command line; with --compact, etcd is compacted at its current revision while
  # the apiserver is down. Clients then resume their watches from revisions the new apiserver no
  # longer serves: 410 Gone.
  [ -f "$dir/pids" ] || { echo "no control plane runs in $dir" >&2; exit 1; }
  old=$(sed -n 2p "$dir/pids")
  grep -q kube-apiserver "/proc/$old/cmdline" 2>/dev/null || { echo "pid $old is not this control plane's kube-apiserver" >&2; exit 1; }
  kill -KILL "$old"
  for _ in $(seq 1 300); do grep -q kube-apiserver "/proc/$old/cmdline" 2>/dev/null || break; sleep 0.1; done
  # Until the new one runs, no pid of an apiserver ("none", which kill refuses): stop must not
  # signal a reused pid.
  sed -i "2s/.*/none/" "$dir/pids"
  if [ "${3:-}" = --compact ]; then
    etcd=$(cat "$dir/etcd-url")
    rev=$(curl -sf --max-time 30 -X POST "$etcd/v3/kv/range" -d '{"key":"AA==","limit":1}' \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
    curl -sf --max-time 120 -X POST "$etcd/v3/kv/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null
    log "compacted etcd at revision $rev"
  fi
  mapfile -d '' apiserver <"$dir/kube-apiserver.argv"
  nohup "${apiserver[@]}" >>"$dir/kube-apiserver.log" 2>&1 </dev/null &
  new=$!
  sed -i "2s/.*/$new/" "$dir/pids"
  server=$(cat "$dir/server")
  # Generous: a loaded 2-core machine starts an apiserver slowly.
  for i in $(seq 1 600); do
    curl -sf --max-time 2 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
      "$server/readyz" >/dev/null 2>&1 && break
    kill -0 "$new" 2>/dev/null || { log "kube-apiserver exited"; tail -20 "$dir/kube-apiserver.log" >&2; exit 1; }
    [ "$i" = 600 ] && { log "kube-apiserver not ready after 300 s"; tail -20 "$dir/kube-apiserver.log" >&2; exit 1; }
    sleep 0.5
  done
  log "restarted kube-apiserver ($old -> $new)"
  exit 0
fi
[ "$cmd" = start ] || { echo "unknown command $cmd" >&2; exit 2; }
owner_pid=
[ "${3:-}" = --owner-pid ] && owner_pid=${4:?--owner-pid needs a PID}

[ -f "$dir/pids" ] && { echo "$dir/pids exists: a control plane runs there; stop it first" >&2; exit 1; }

# shellcheck disable=SC1090
source "$(bash "$here/build.sh" k8s)"
bin=$CAPMS_K8S_BIN

# Five distinct free ports, below the kernel's ephemeral range (see free_ports.py).
{ read -r etcd_port; read -r peer_port; read -r etcd_metrics; read -r api_port; read -r kcm_port; } \
  < <(python3 "$here/free_ports.py" 5)

pki="$dir/pki"
if [ ! -f "$pki/ca.crt" ]; then
  mkdir -p "$pki"
  (
    cd "$pki"
    ec() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "$@" 2>/dev/null; }
    ec -x509 -days 365 -subj /CN=capms-test-ca -keyout ca.key -out ca.crt \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    issue() { # name subject extensions
      ec -subj "$2" -keyout "$1.key" -out "$1.csr"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" -days 365 \
        -out "$1.crt" -extfile <(printf '%b' "$3") 2>/dev/null
      rm -f "$1.csr"
    }
    issue apiserver /CN=kube-apiserver \
      'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment'
    issue admin "/O=system:masters/CN=capms-admin" 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment'
    openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out sa.key
    openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
  )
fi

: >"$dir/pids"
start_bg() { # name args...
  local name=$1; shift
  nohup "$@" >"$dir/$name.log" 2>&1 </dev/null &
  echo $! >>"$dir/pids"
}
fail() {
  log "$1; last lines of $2:"
  tail -20 "$dir/$2" >&2 || true
  stop_pids "$dir/pids"
  exit 1
}

rm -rf "$dir/etcd-data"
start_bg etcd "$bin/etcd" --name=capms --data-dir="$dir/etcd-data" \
  --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
  --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
  --initial-cluster="capms=http://127.0.0.1:$peer_port" --listen-metrics-urls="http://127.0.0.1:$etcd_metrics" \
  --unsafe-no-fsync --log-level=warn

apiserver=("$bin/kube-apiserver"
  --etcd-servers="http://127.0.0.1:$etcd_port"
  --bind-address=127.0.0.1 --secure-port="$api_port"
  --advertise-address=127.0.0.1 --endpoint-reconciler-type=none
  --cert-dir="$pki" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key"
  --client-ca-file="$pki/ca.crt"
  --service-account-issuer="https://127.0.0.1:$api_port"
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key"
  --service-cluster-ip-range=10.0.0.0/24
  --authorization-mode=RBAC --allow-privileged=true
  --disable-admission-plugins=ServiceAccount)
# CAPMS_APISERVER_AUDIT=1 (make bench): an audit log of the writes to Machines and
# MetalStackMachines, for telling which write preceded each conflict.
if [ "${CAPMS_APISERVER_AUDIT:-}" = 1 ]; then
  cat >"$dir/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch"]
  resources:
  - group: cluster.x-k8s.io
    resources: ["machines", "machines/status"]
  - group: infrastructure.cluster.x-k8s.io
    resources: ["metalstackmachines", "metalstackmachines/status"]
- level: None
POLICY
  # Not rotated at the default 100 MB: a 1,000-worker benchmark with a provider taking no time
  # writes more, and the split of Cluster API's writes needs the whole run.
  apiserver+=(--audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/audit.log"
    --audit-log-format=json --audit-log-mode=batch --audit-log-batch-max-wait=1s
    --audit-log-maxsize=10000)
fi
# What restart-apiserver needs: the command line, and etcd's address for a compaction.
printf '%s\0' "${apiserver[@]}" >"$dir/kube-apiserver.argv"
echo "http://127.0.0.1:$etcd_port" >"$dir/etcd-url"
start_bg kube-apiserver "${apiserver[@]}"

curl_api() { curl -sf --max-time 2 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:$api_port$1"; }
for i in $(seq 1 120); do
  curl_api /readyz >/dev/null 2>&1 && break
  kill -0 "$(sed -n 2p "$dir/pids")" 2>/dev/null || fail "kube-apiserver exited" kube-apiserver.log
  kill -0 "$(sed -n 1p "$dir/pids")" 2>/dev/null || fail "etcd exited" etcd.log
  [ "$i" = 120 ] && fail "kube-apiserver not ready after 60 s" kube-apiserver.log
  sleep 0.5
done

b64() { base64 -w0 <"$1"; }
cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: capms-local
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(b64 "$pki/ca.crt")
users:
- name: capms-admin
  user:
    client-certificate-data: $(b64 "$pki/admin.crt")
    client-key-data: $(b64 "$pki/admin.key")
contexts:
- name: capms-local
  context: {cluster: capms-local, user: capms-admin}
current-context: capms-local
EOF

start_bg kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig="$dir/kubeconfig" --authentication-kubeconfig="$dir/kubeconfig" --authorization-kubeconfig="$dir/kubeconfig" \
  --controllers=garbagecollector,namespace,clusterrole-aggregation \
  --leader-elect=false --use-service-account-credentials=false \
  --bind-address=127.0.0.1 --secure-port="$kcm_port" \
  --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key"
sleep 1
kill -0 "$(sed -n 3p "$dir/pids")" 2>/dev/null || fail "kube-controller-manager exited" kube-controller-manager.log

if [ -n "$owner_pid" ]; then
  # Stops the control plane once the owner is gone, however it ended.
  nohup bash -c 'while kill -0 "$1" 2>/dev/null && [ -f "$2/pids" ]; do sleep 1; done; exec bash "$3" stop "$2" --purge' \
    watchdog "$owner_pid" "$dir" "$here/controlplane.sh" >"$dir/watchdog.log" 2>&1 </dev/null &
  echo $! >"$dir/watchdog.pid"
fi

echo "https://127.0.0.1:$api_port" >"$dir/server"
log "control plane ready at https://127.0.0.1:$api_port ($(curl_api /version | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])'))"
echo "export KUBECONFIG=$dir/kubeconfig"
