"""Time as the core reads it: :class:`Clocks`, built once by the :class:`~servectl.service.context.Context`
(tests give one that moves their fake clock) and handed to the runtime, the gate and the transactions."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Clocks:
    """Time as the core reads it: monotonic seconds (timings), epoch seconds (journal, history), the pause
    while waiting (tests pass one that moves their fake clock)."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
