"""Converters from other frameworks' model files to clearsight artifacts."""
