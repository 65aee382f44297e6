#!/bin/sh
# First start (PGDATA empty): create the cluster with POSTGRES_USER as its superuser (password
# POSTGRES_PASSWORD, scram-sha-256 on every connection) and the database POSTGRES_DB. Then (and
# on every later start) run the server in the foreground with the arguments given.
set -eu
user=${POSTGRES_USER:-postgres}
database=${POSTGRES_DB:-$user}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "undoproxy-postgres: POSTGRES_PASSWORD is not set; it is needed to create the cluster" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pwfile"
  # Password authentication from any address the server listens on (listen_addresses decides
  # which: 127.0.0.1 in deploy/docker-compose.yml).
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  if [ "$database" != postgres ]; then
    # Single-user mode: no server, no connection, before the first real start.
    echo "CREATE DATABASE \"$database\"" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "undoproxy-postgres: cluster created in $PGDATA (superuser $user, database $database)"
fi
unset POSTGRES_PASSWORD
exec postgres -D "$PGDATA" "$@"
