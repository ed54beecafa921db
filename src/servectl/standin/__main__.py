"""``python -m servectl.standin [sglang flags]``: the stand-in engine on the host, without Docker."""

from servectl.standin.engine import run_process

run_process()
