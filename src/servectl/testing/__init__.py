"""Fakes of servectl's side-effect interfaces and ready-made scenarios, for unit tests of the core.

Importable by users' tests too: ``from servectl.testing import FakeGpuInventory``.
- :mod:`servectl.testing.fakes`: GPU inventory and host probe fakes;
- :mod:`servectl.testing.docker`: the fake Docker engine (runtime, health gate, swap and preflight);
- :mod:`servectl.testing.http`: the Context's HTTP adapter on a transport (the fake engine's);
- :mod:`servectl.testing.swap`: a fake service runtime, conflicts, history, lock and clock for swap;
- :mod:`servectl.testing.host`: :class:`FakeHost`, a :class:`servectl.Host` on all of these.
"""

from servectl.testing.docker import FakeDockerEngine, FakeScript, sglang_like_script
from servectl.testing.fakes import FakeGpuInventory, FakeHostProbe, fake_model_dir, make_device
from servectl.testing.host import FakeHost
from servectl.testing.http import FakeHttp
from servectl.testing.swap import FakeConflicts

__all__ = [
    "FakeConflicts",
    "FakeDockerEngine",
    "FakeGpuInventory",
    "FakeHost",
    "FakeHostProbe",
    "FakeHttp",
    "FakeScript",
    "fake_model_dir",
    "make_device",
    "sglang_like_script",
]
