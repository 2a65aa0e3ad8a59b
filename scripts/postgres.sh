#!/usr/bin/env bash
# The machine's PostgreSQL cluster for the tests and benchmarks: `configure` lets loopback connections in
# as any user without a password (a test machine only); `start` starts the cluster if it is down.
set -euo pipefail
version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
case "${1:-}" in
  configure)
    hba=/etc/postgresql/$version/main/pg_hba.conf
    if ! grep -q '^# stylus: loopback trust' "$hba"; then
      { echo '# stylus: loopback trust (tests)'; echo 'host all all 127.0.0.1/32 trust'; echo 'host all all ::1/128 trust'
        cat "$hba"; } > "$hba.new"
      mv "$hba.new" "$hba"
      chown postgres:postgres "$hba"
    fi ;;
  start)
    if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
      pg_ctlcluster "$version" main start
    fi ;;
  *) echo "usage: $0 configure|start" >&2; exit 2 ;;
esac
