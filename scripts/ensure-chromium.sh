#!/usr/bin/env bash
# Make sure Debian's headless-capable Chromium and its chromedriver are installed (the gateway dashboard's
# browser test, tests/integration/test_gateway_dashboard_browser.py). Idempotent: nothing to do when both are
# there. Prints how long the install took.
set -euo pipefail

log() { echo "ensure-chromium: $*" >&2; }

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  log "already installed: $(/usr/bin/chromium --version 2>/dev/null | head -n 1)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "chromium is missing and we are not root: sudo apt-get install -y chromium chromium-driver"
  exit 1
fi
started=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium chromium-driver >/dev/null
log "installed $(/usr/bin/chromium --version 2>/dev/null | head -n 1) in $(( $(date +%s) - started )) s"
