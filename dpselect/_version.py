"""The package version, in one place: setuptools reads it statically (``[tool.setuptools.dynamic]``
in pyproject.toml) and ``dpselect.__version__`` imports it. Keep it a plain literal assignment so
the build can read it without importing the (possibly unbuilt) package."""

__version__ = "0.2.0.dev0"
