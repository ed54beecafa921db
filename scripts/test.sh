#!/usr/bin/env bash
# The full test suite, from a fresh machine: install servectl with its test extras, make sure a Docker engine
# answers (installing and starting one if needed), then run unit and integration tests.
# GPU tests (marked `gpu`) skip themselves where no NVIDIA driver is present.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says what it does before it starts and how long it took (the first run builds for minutes).
step() { echo "test.sh: $1" >&2; STEP_START=$SECONDS; }
done_step() { echo "test.sh: done in $((SECONDS - STEP_START)) s" >&2; }
step "installing servectl with its test extras (pip)"
python3 -m pip install -q -e '.[test]'
done_step
step "making sure a Docker engine answers (installs Debian's docker.io when none does)"
bash scripts/ensure-docker.sh
done_step
# The CI installers below are test tooling in tests/tools/servectl_ci (not shipped in the wheel).
ci_tool() { PYTHONPATH="$PWD/tests/tools${PYTHONPATH:+:$PYTHONPATH}" python3 -m "servectl_ci.$1"; }
# The real SGLang 0.5.23 parser (wheel + CPU torch, ~2.3 GB) for the differential parser tests; cached by its
# recipe hash under ~/.cache/servectl-ci, so only the first run on a machine builds it (7 min here, 2 cores).
step "the SGLang 0.5.23 parser venv (~2.3 GB, ~7 min the first time; cached)"
ci_tool sglang_venv
done_step
export SERVECTL_REQUIRE_SGLANG_PARSER=1  # the venv is there: parser parity tests must run, never skip
# The real-SGLang test images of tests/integration/test_engine_image_docker.py: the parser venv (cached under
# ~/.cache/servectl-ci by recipe hash) plus two images imported into Docker (tagged by content hash, so a
# later run finds them); prints the build time (0 when found; about 90 s here once the venv exists).
step "the two real-SGLang test images (~90 s the first time; cached)"
ci_tool sglang_image
done_step
# The real agent clients of the qualify `clients` gate (tests/integration/test_qualify_clients_docker.py) and of
# the gateway's Anthropic family (Claude Code, tests/integration/test_claude_code_gateway_docker.py): Pi, OpenClaw
# and Claude Code from npm, Hermes from PyPI, pinned and cached by version under ~/.cache/servectl-ci; OpenClaw
# needs Node >= 24.16 (Claude Code's install script >= 22), so Node 24 comes from npm too (the `node` package,
# cached as node-<version>; the machine's Node is left alone). Prints each install's time: about 4 min the first
# time here (OpenClaw and Node 47 s, Claude Code 4 s), 0 once cached.
step "Node 24 and the Pi, OpenClaw, Hermes and Claude Code agent clients (~4 min the first time; cached)"
ci_tool agent_clients
done_step
export SERVECTL_REQUIRE_CLIENTS=1  # they are installed: the real-client tests must run, never skip
# Debian's Chromium + chromedriver for the gateway dashboard's browser test (skipped when installed; about
# 2 min the first time here, apt-get update included); its screenshot goes to test-artifacts/ (printed below).
step "Chromium and chromedriver for the dashboard test (apt-get, system-wide; ~2 min the first time)"
bash scripts/ensure-chromium.sh
done_step
export SERVECTL_REQUIRE_BROWSER=1  # the browser is there: the dashboard test must run, never skip
export SERVECTL_TEST_ARTIFACTS="${SERVECTL_TEST_ARTIFACTS:-$PWD/test-artifacts}"
echo "test artifacts (screenshots): $SERVECTL_TEST_ARTIFACTS"
# The swap soak runs its full 50 rounds (about 85 s on 2 cores); SERVECTL_SOAK_SWAPS=N changes that.
export SERVECTL_SOAK_SWAPS="${SERVECTL_SOAK_SWAPS:-50}"
export SERVECTL_REQUIRE_DOCKER=1  # an engine answers now: integration tests must run, never skip
exec python3 -m pytest "$@"
