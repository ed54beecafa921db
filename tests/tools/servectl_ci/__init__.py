"""CI installers: what scripts/test.sh builds or installs once per machine before the tests, cached under
``~/.cache/servectl-ci`` (or ``$SERVECTL_CI_CACHE``). Test tooling, not servectl: they do not ship in the wheel.

- :mod:`servectl_ci.sglang_venv`: the real SGLang 0.5.23 parser venv (cached by recipe hash);
- :mod:`servectl_ci.sglang_image`: the upstream and patched SGLang test images (tagged by content hash);
- :mod:`servectl_ci.agent_clients`: the real agent clients of the ``clients`` gate (cached by version).

Importable as ``servectl_ci`` from tests (pytest's ``pythonpath`` names ``tests/tools``) and from the command
line with ``PYTHONPATH=tests/tools python3 -m servectl_ci.<module>``.
"""
