#!/usr/bin/env bash
# Installs what the tests need on a fresh machine: redis-server and
# redis-sentinel (Debian's packages) when they are missing, and Jaeger
# built from the Go module proxy into a cache folder outside the clone
# (reused when already there).
# Prints the Jaeger binary's path on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v redis-sentinel >/dev/null; then
  echo "installing redis-server and redis-sentinel (Debian packages)" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends redis-server redis-tools redis-sentinel >&2
fi
"$here/jaeger/build.sh"
