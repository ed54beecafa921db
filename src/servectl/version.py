"""servectl's version: the one home of the number (pyproject.toml reads it from here, ``[tool.setuptools.dynamic]``).

A leaf: it imports nothing, so any module may take the version from here (``from servectl.version import
__version__``) without loading the package's public face, whose lazy names reach up to the CLI's layer.
"""

__version__ = "0.1.0"
