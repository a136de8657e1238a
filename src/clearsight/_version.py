"""The package version, in a module of its own so lower layers need not import the API facade."""

__version__ = "0.1.0"
