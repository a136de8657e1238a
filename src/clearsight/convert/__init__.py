"""Converters that bring weights published in other formats into clearsight modules."""
