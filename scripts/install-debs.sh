#!/usr/bin/env bash
# Debian packages the project needs (a JDK for Kafka, HDFS and Spark; Maven to resolve their jars; PostgreSQL
# for monoid state; librdkafka's headers and gcc for stylus/kafka/_columnar.c; Chromium for the status page's screenshots; promtool for the alert rules; kcat, wrk).
# Idempotent: installs only what is missing, then lets local connections to PostgreSQL in without a password.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
[ -f /usr/include/librdkafka/rdkafka.h ] || need+=(librdkafka-dev)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
bash "$(dirname "$0")/postgres.sh" configure
