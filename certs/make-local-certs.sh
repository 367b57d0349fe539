#!/usr/bin/env bash
# Local certificates for tests and the demo, where no cert-manager runs: a CA (created once in
# CA_DIR, or reused: the local control plane's) and a serving certificate for the webhook server
# in OUT_DIR as tls.crt/tls.key, the file names cert-manager's Secret mount uses.
#
#   certs/make-local-certs.sh CA_DIR OUT_DIR [SAN ...]    # default SANs: IP:127.0.0.1 DNS:localhost
set -euo pipefail
ca_dir=${1:?usage: $0 CA_DIR OUT_DIR [SAN ...]}
out_dir=${2:?usage: $0 CA_DIR OUT_DIR [SAN ...]}
shift 2
sans=${*:-IP:127.0.0.1 DNS:localhost}
mkdir -p "$ca_dir" "$out_dir"
if [ ! -f "$ca_dir/ca.crt" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 365 -subj /CN=capms-local-ca \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout "$ca_dir/ca.key" -out "$ca_dir/ca.crt" 2>/dev/null
fi
first=${sans%% *}
# openssl is chatty on stderr; keep its words and show them only when a step fails.
log="$out_dir/openssl.log"
quiet() { "$@" 2>"$log" || { cat "$log" >&2; rm -f "$log"; return 1; }; }
quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=${first#*:}" \
  -keyout "$out_dir/tls.key.tmp" -out "$out_dir/tls.csr"
# A random serial rather than -CAcreateserial: several tests sign with one CA at the same time,
# and a shared ca.srl file is a race between them.
quiet openssl x509 -req -in "$out_dir/tls.csr" -CA "$ca_dir/ca.crt" -CAkey "$ca_dir/ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -days 30 -out "$out_dir/tls.crt.tmp" \
  -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature' "$(echo "$sans" | tr ' ' ',')")
rm -f "$out_dir/tls.csr" "$log"
# Key first, then certificate, each by rename: a server reading in between sees a consistent pair
# or the old one.
mv "$out_dir/tls.key.tmp" "$out_dir/tls.key"
mv "$out_dir/tls.crt.tmp" "$out_dir/tls.crt"
