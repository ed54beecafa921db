#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io when dockerd is missing, start dockerd when no
# engine answers, and wait for it. Idempotent; safe to run on a machine that already has an engine.
set -euo pipefail

log() { echo "ensure-docker: $*" >&2; }

if docker info >/dev/null 2>&1; then
  log "engine already answers"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    log "dockerd is missing and we are not root: install docker.io (sudo apt-get install docker.io)"
    exit 1
  fi
  log "installing Debian's docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq docker.io >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  mkdir -p /var/log
  nohup dockerd >/var/log/servectl-dockerd.log 2>&1 &
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
fi

if ! docker info >/dev/null 2>&1; then
  log "dockerd did not answer within 60 s; last lines of /var/log/servectl-dockerd.log:"
  tail -n 30 /var/log/servectl-dockerd.log >&2 || true
  exit 1
fi
log "engine ready: $(docker version --format '{{.Server.Version}}')"
