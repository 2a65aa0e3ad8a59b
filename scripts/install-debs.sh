#!/usr/bin/env bash
# Debian packages the tests need. Idempotent: installs only what is missing.
set -euo pipefail
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v kcat >/dev/null 2>&1 || need+=(kcat)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
echo "installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
