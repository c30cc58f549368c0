#!/usr/bin/env bash
# Builds Jaeger v2 (cmd/jaeger, v1.76.0) from the Go module proxy into a cache
# folder outside the clone and prints the binary's path. Reuses the binary when
# it is already there. Jaeger lives in a module of its own (this folder's
# go.mod): its OpenTelemetry versions clash with the project's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${FAIRGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fairgate}
bin="$cache/jaeger-v1.76.0/jaeger"
if [ ! -x "$bin" ]; then
  mkdir -p "$(dirname "$bin")"
  echo "building Jaeger into $bin (first time: several minutes)" >&2
  (cd "$here" && go build -buildvcs=false -modfile="$here/go.mod" -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger)
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
