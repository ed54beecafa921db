"""``python -m servectl.standin [sglang flags]``: the stand-in engine on the host, without Docker."""

import sys

from servectl.standin.engine import main

sys.exit(main())
