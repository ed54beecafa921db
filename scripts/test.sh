#!/usr/bin/env bash
# The full test suite, from a fresh machine: install servectl with its test extras, make sure a Docker engine
# answers (installing and starting one if needed), then run unit and integration tests.
# GPU tests (marked `gpu`) skip themselves where no NVIDIA driver is present.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install -q -e '.[test]'
bash scripts/ensure-docker.sh
# swap's compose-conflict test needs a compose CLI; without one it skips (best effort: Debian's docker-compose).
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null && apt-get install -y -qq docker-compose >/dev/null 2>&1) \
    || echo "test.sh: could not install docker-compose; the compose conflict test will skip" >&2
fi
export SERVECTL_REQUIRE_DOCKER=1  # an engine answers now: integration tests must run, never skip
exec python3 -m pytest "$@"
