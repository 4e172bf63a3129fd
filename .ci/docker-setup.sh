#!/usr/bin/env bash
# Make Docker usable for the suite's Docker tests on a fresh Debian machine:
#   1. install Docker's engine from Debian's packages when `dockerd` is absent;
#   2. start `dockerd` in the background when the engine does not answer (log: $DOCKERD_LOG);
#   3. build the local base image (see base-image.sh), since no image can be pulled here.
# Idempotent: each step is skipped when already done.  Usage: .ci/docker-setup.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${SUITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/suite}"
DOCKERD_LOG="${DOCKERD_LOG:-$CACHE/dockerd.log}"
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

if ! command -v dockerd >/dev/null; then
  echo "docker-setup: installing Docker's engine (docker.io)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  mkdir -p "$(dirname "$DOCKERD_LOG")"
  echo "docker-setup: starting dockerd (log: $DOCKERD_LOG)"
  $SUDO setsid nohup dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
  for _ in $(seq 1 90); do
    if docker info >/dev/null 2>&1; then break; fi
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    echo "docker-setup: dockerd did not answer within 90 s; last lines of $DOCKERD_LOG:" >&2
    tail -n 5 "$DOCKERD_LOG" >&2 || true
    exit 1
  fi
fi
echo "docker-setup: engine $(docker version --format '{{.Server.Version}}') answers"

"$HERE/base-image.sh"
