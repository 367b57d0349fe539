#!/usr/bin/env bash
# Regenerates go.mod/go.sum of the wrapper module that builds cert-manager's controller and
# cainjector from the Go module proxy. v1.11.5 is the newest release whose commands live in the
# root module (later releases split them into modules the proxy does not serve); its go.mod
# replaces github.com/miekg/dns, which only a main module can do, hence this wrapper.
set -euo pipefail
CM=${CM:-v1.11.5}
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
rm -f go.mod go.sum
go mod init capms.invalid/tests/cert-manager
upstream=$(cd "$(mktemp -d)" && go mod download -json "github.com/cert-manager/cert-manager@$CM" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
sed -n 's#^replace \(.*\)$#\1#p' "$upstream" | while read -r line; do
  go mod edit -replace="$(echo "$line" | sed 's# => #=#; s# \(v[^ ]*\)=#@\1=#; s#=\([^ ]*\) \(v[^ ]*\)$#=\1@\2#')"
done
go get "github.com/cert-manager/cert-manager@$CM"
go get -tool "github.com/cert-manager/cert-manager/cmd/controller@$CM" "github.com/cert-manager/cert-manager/cmd/cainjector@$CM"
go mod tidy
