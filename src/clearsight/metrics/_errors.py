"""Errors raised by the metrics: both a `ClearsightError` (one line, shown to the user) and a
`ValueError` (what callers of a numeric function expect)."""

from __future__ import annotations

from clearsight.errors import ClearsightError, PairingError


class MetricInputError(ClearsightError, ValueError):
    """An image or argument a metric cannot measure (wrong shape or dtype, too small, NaN)."""


class ShapeMismatchError(PairingError, ValueError):
    """Two images that are compared differ in shape; the message names both shapes."""
