"""Fakes of servectl's side-effect interfaces and ready-made scenarios, for unit tests of the core.

Importable by users' tests too: ``from servectl.testing import FakeGpuInventory``.
- :mod:`servectl.testing.fakes`: GPU inventory, host probe and Docker facts fakes;
- :mod:`servectl.testing.docker`: a fake Docker engine for the runtime and the health gate;
- :mod:`servectl.testing.swap`: a fake service runtime, conflicts, history, lock and clock for swap.
"""

from servectl.testing.fakes import FakeDockerFacts, FakeGpuInventory, FakeHostProbe, fake_model_dir, make_device

__all__ = ["FakeDockerFacts", "FakeGpuInventory", "FakeHostProbe", "fake_model_dir", "make_device"]
