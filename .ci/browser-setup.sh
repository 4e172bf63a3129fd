#!/usr/bin/env bash
# Make a headless Chromium available for the website's page tests on a fresh Debian machine:
# installs Debian's `chromium` package when no Chromium is found, then prints its version.
# Idempotent.  Usage: .ci/browser-setup.sh
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

if [ -n "${SUITE_CHROMIUM:-}" ] && [ -x "$SUITE_CHROMIUM" ]; then
  CHROMIUM="$SUITE_CHROMIUM"
elif [ -x /usr/bin/chromium ]; then
  CHROMIUM=/usr/bin/chromium
else
  echo "browser-setup: installing Debian's chromium"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
  CHROMIUM=/usr/bin/chromium
fi
echo "browser-setup: $("$CHROMIUM" --version 2>/dev/null | tail -n 1)"
