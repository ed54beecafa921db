#!/usr/bin/env bash
# The full test suite, from a fresh machine: install servectl with its test extras, make sure a Docker engine
# answers (installing and starting one if needed), then run unit and integration tests.
# GPU tests (marked `gpu`) skip themselves where no NVIDIA driver is present.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install -q -e '.[test]'
bash scripts/ensure-docker.sh
# The real-SGLang test images of tests/integration/test_engine_image_docker.py: the parser venv (cached under
# ~/.cache/servectl-ci by recipe hash) plus two images imported into Docker (tagged by content hash, so a
# later run finds them); prints the build time (0 when found).
python3 -m servectl.testing.sglang_image
export SERVECTL_REQUIRE_DOCKER=1  # an engine answers now: integration tests must run, never skip
exec python3 -m pytest "$@"
