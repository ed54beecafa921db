"""servectl: a launcher and serving-profile manager for SGLang.

The public API is the set of keyword-only core functions re-exported by :mod:`servectl.api`;
the ``servectl`` command is a thin layer over them.
"""

__version__ = "0.1.0"
