"""Shared test configuration."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

#: The dispositions an interactive Python starts with: Ctrl-C raises KeyboardInterrupt, SIGTERM ends it.
PYTHON_DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


@pytest.fixture(autouse=True, scope="session")
def python_signal_dispositions() -> Iterator[None]:
    """Run every test with Python's own SIGINT/SIGTERM handling, whatever the runner inherited.

    Tests send these signals to this process and to the servectl processes they start (which inherit an
    ignored signal, not a handled one). A background job of a non-interactive shell (``bash -c 'pytest &'``,
    as some CI runners start it) begins with SIGINT ignored; without this, Ctrl-C tests would see nothing.
    """
    saved = {signum: signal.getsignal(signum) for signum in PYTHON_DEFAULTS}
    for signum, handler in PYTHON_DEFAULTS.items():
        signal.signal(signum, handler)
    yield
    for signum, handler in saved.items():
        if handler is not None:
            signal.signal(signum, handler)
