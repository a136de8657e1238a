"""clearsight: compact vision models from data to a deployed, measured artifact."""

__version__ = "0.1.0"
