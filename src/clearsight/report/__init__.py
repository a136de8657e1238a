"""Reports people look at: self-contained HTML pages for evaluations and comparisons."""

from clearsight.report.html import (
    model_card,
    render_compare_report,
    render_eval_report,
    write_report,
)
from clearsight.report.thumbs import ThumbnailCollector

__all__ = [
    "ThumbnailCollector",
    "model_card",
    "render_compare_report",
    "render_eval_report",
    "write_report",
]
