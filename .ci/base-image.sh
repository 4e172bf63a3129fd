#!/usr/bin/env bash
# Build the local base image that the suite's CPU images are built FROM where no image can be
# pulled from a registry: Debian bookworm made with debootstrap (python3, venv, pip, CA
# certificates, cmake, g++, make), with this machine's CA bundle copied in so that pip and apt
# inside containers trust the same certificates as the host, then `docker import`ed.
# The Debian mirror is the host's own (read from its apt sources); skipped when the image exists.
# Usage: .ci/base-image.sh [IMAGE]   (default: $SUITE_BASE_IMAGE or suite-base:bookworm)
set -euo pipefail
IMAGE="${1:-${SUITE_BASE_IMAGE:-suite-base:bookworm}}"
SUITE="bookworm"
PACKAGES="python3,python3-venv,python3-pip,ca-certificates,cmake,g++,make"
HOST_CA="/etc/ssl/certs/ca-certificates.crt"
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base-image: $IMAGE exists"
  exit 0
fi
if ! command -v debootstrap >/dev/null; then
  echo "base-image: installing debootstrap"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

# The host's Debian mirror: the first URI of its apt sources (deb822 or one-line format).
MIRROR="$( (cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true) \
  | awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}')"
if [ -z "$MIRROR" ]; then
  MIRROR="$( (cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true) \
    | awk '/^deb / && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; exit}}')"
fi

ROOT="$(mktemp -d)"
trap '$SUDO rm -rf "$ROOT"' EXIT
start=$(date +%s)
echo "base-image: debootstrap $SUITE into $ROOT (mirror: ${MIRROR:-debootstrap default})"
$SUDO debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" ${MIRROR:+"$MIRROR"} \
  >"$ROOT.debootstrap.log" 2>&1 || {
  echo "base-image: debootstrap failed; last lines of $ROOT.debootstrap.log:" >&2
  tail -n 5 "$ROOT.debootstrap.log" >&2
  exit 1
}
if [ -f "$HOST_CA" ]; then
  $SUDO cp "$HOST_CA" "$ROOT/etc/ssl/certs/ca-certificates.crt"
fi
$SUDO rm -rf "$ROOT/var/cache/apt/archives/"*.deb "$ROOT/var/lib/apt/lists/"*
$SUDO tar -C "$ROOT" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' \
  - "$IMAGE" >/dev/null
rm -f "$ROOT.debootstrap.log"
echo "base-image: built $IMAGE in $(( $(date +%s) - start )) s"
