#!/usr/bin/env bash
# Give this machine what tests/test_container.py and tests/test_deploy_*.py need: a running
# Docker engine, Compose and a local base image. Run as root on Debian 12 (`.ci/run` does); safe
# to run again, each step is skipped when already done.
#   1. apt-get install docker.io debootstrap docker-compose (when missing; Compose is Debian's
#      docker-compose 1.29 unless the docker client already has the `compose` plugin)
#   2. start dockerd (no bridge, no iptables: every container runs with --network host and talks
#      only to 127.0.0.1) unless one already answers; wait for its socket
#   3. build undoproxy-base:bookworm with debootstrap and `docker import` (no image registry is
#      reachable here, Debian's package mirror is), unless the image exists
# Environment: UNDOPROXY_BASE_IMAGE (default undoproxy-base:bookworm), DEBIAN_MIRROR.
set -euo pipefail

BASE_IMAGE=${UNDOPROXY_BASE_IMAGE:-undoproxy-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
LOG=${DOCKERD_LOG:-/var/log/undoproxy-dockerd.log}
say() { echo "docker/ci-setup: $*"; }

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if ! command -v docker-compose >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then
  need+=(docker-compose)
fi
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
  say "dockerd already running"
else
  say "starting dockerd (log: $LOG)"
  # setsid: the daemon outlives this script and is not in its process group.
  setsid dockerd --bridge=none --iptables=false >"$LOG" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    if [ -S /var/run/docker.sock ] && docker info >/dev/null 2>&1; then
      break
    fi
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    say "dockerd did not answer within 60 s; its log:"
    tail -n 40 "$LOG" >&2 || true
    exit 1
  fi
  say "dockerd is up"
fi

if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  say "base image $BASE_IMAGE already present"
else
  root=$(mktemp -d /var/tmp/undoproxy-base.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  say "debootstrap bookworm into $root (a few minutes)"
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || {
    say "debootstrap failed; its log:"
    tail -n 40 "$root.log" >&2
    rm -f "$root.log"
    exit 1
  }
  rm -f "$root.log"
  # What a container needs no copy of: package lists and caches (apt-get update refills them).
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
  say "importing $root as $BASE_IMAGE"
  tar -C "$root" -c . | docker import - "$BASE_IMAGE" >/dev/null
  say "base image $BASE_IMAGE built"
fi
