"""The Docker labels servectl puts on its containers: every decision about a running service reads these.

A module of its own so that ``status`` and the Docker adapter can read labels without importing the
compiler (and with it the pydantic profile models).
"""

from __future__ import annotations

LABEL_PREFIX = "servectl."
LABEL_MANAGED = "servectl.managed"
LABEL_PROFILE = "servectl.profile"
LABEL_PLAN_HASH = "servectl.plan-hash"
LABEL_PORT = "servectl.port"
LABEL_HOST = "servectl.host"
LABEL_GPUS = "servectl.gpus"
LABEL_ROLE = "servectl.role"
LABEL_SERVED_NAME = "servectl.served-name"
LABEL_SOURCE = "servectl.source"
LABEL_STOP_GRACE = "servectl.stop-grace-s"
