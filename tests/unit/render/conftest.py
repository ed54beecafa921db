"""The render tests import their helpers from ``render_support`` (a unique module name, not ``conftest``)."""
