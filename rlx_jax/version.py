"""The package version (also pyproject.toml's `version`), in a module of its own so that the
backends can stamp it on what they build without importing the package."""
__version__ = "0.1.0"
