#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests; prints its SQLAlchemy URL on stdout.
set -euo pipefail
PORT=${PG_PORT:-55432}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
D=${PG_DIR:-/tmp/autotuner-ci-pg}
if ! su postgres -c "$PGBIN/pg_ctl -D $D/data status" >/dev/null 2>&1; then
  rm -rf "$D"; mkdir -p "$D"; chown postgres:postgres "$D"; chmod 700 "$D"
  su postgres -c "$PGBIN/initdb -D $D/data -U postgres -A trust -E UTF8 --locale=C.UTF-8" >/dev/null
  su postgres -c "$PGBIN/pg_ctl -D $D/data -l $D/server.log -w -o '-p $PORT -k $D -c listen_addresses=127.0.0.1 -c max_connections=300' start" >/dev/null
fi
echo "postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
