#!/usr/bin/env bash
# Installs what the tests need on a fresh machine: redis-server,
# redis-sentinel, prometheus (for promtool) and chromium (Debian's packages;
# the console's browser test drives headless Chromium) when they are
# missing, and Jaeger built from the Go module proxy into a cache folder
# outside the clone (reused when already there).
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
if ! command -v promtool >/dev/null; then
  echo "installing prometheus (Debian package; its promtool tests the alert rules)" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >&2
fi
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then
  echo "installing chromium (Debian package)" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >&2 ||
    echo "chromium could not be installed: the console's browser test will skip" >&2
fi
"$here/jaeger/build.sh"
