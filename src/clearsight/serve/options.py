"""Form fields -> the same option objects the CLI builds (and their `OptionError`s).

Fields arrive as text; each is parsed the way its command-line flag is, then validated
once by `InferenceOptions` (restoration) so the API and the CLI accept and refuse alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from clearsight.defaults import DEFAULT_STAGE_THRESHOLD
from clearsight.errors import OptionError, check_unit_interval
from clearsight.families import Family

if TYPE_CHECKING:
    from clearsight.engine.inference import InferenceOptions

RESTORE_FIELDS = ("tile", "tta", "scales", "stages", "stage_threshold")
DETECT_FIELDS = ("score_threshold", "restore")
OUTPUT_FIELDS = {"restore": ("format",), "detect": ("draw",)}
COMMON_FIELDS = ("image", "model")
JOB_FIELDS = {
    Family.RESTORATION: ("video", "model", *RESTORE_FIELDS, "temporal"),
    Family.DETECTION: ("video", "model", *DETECT_FIELDS, "track"),
}
"""`POST /v1/jobs`: the video, its model, and the options of the model's family (as the
video commands' flags: `--temporal` for restorers, `--track` for detectors)."""
FIELD_FOR_OPTION = {"ensemble": "tta"}
"""`InferenceOptions` fields whose form field (like the CLI flag) has another name."""


def field_name(option: str) -> str:
    """The form field that sets `option` ("ensemble" -> "tta"), for error messages."""
    return FIELD_FOR_OPTION.get(option, option)


def check_fields(fields: Mapping[str, str], kind: str) -> None:
    """Refuse a field this endpoint does not know (a typo must not pass silently)."""
    known = (
        COMMON_FIELDS
        + (RESTORE_FIELDS if kind == "restore" else DETECT_FIELDS)
        + OUTPUT_FIELDS[kind]
    )
    for name in fields:
        if name not in known:
            raise OptionError(name, f"unknown field; known: {', '.join(known)}")


def check_job_fields(fields: Mapping[str, str], family: Family) -> None:
    """Refuse a field a video job of this family does not take."""
    known = JOB_FIELDS[family]
    for name in fields:
        if name not in known:
            raise OptionError(name, f"unknown field for this model; known: {', '.join(known)}")


def _int_or_none(name: str, text: str | None) -> int | None:
    if text is None or text.strip() == "":
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise OptionError(name, f"must be a whole number, got {text!r}") from None


def _float(name: str, text: str | None, default: float) -> float:
    if text is None or text.strip() == "":
        return default
    try:
        value = float(text.strip())
    except ValueError:
        raise OptionError(name, f"must be a number, got {text!r}") from None
    if math.isnan(value):
        raise OptionError(name, f"must be a number, got {text!r}")
    return value


def restore_options(fields: Mapping[str, str]) -> InferenceOptions:
    """`InferenceOptions` from the restore form's text fields (`--tile`, `--tta`, `--scales`,
    `--stages`, `--stage-threshold` as the CLI reads them)."""
    from clearsight.engine.inference import InferenceOptions, parse_scales

    return InferenceOptions(
        tile=_int_or_none("tile", fields.get("tile")),
        ensemble=(fields.get("tta") or "none").strip(),  # type: ignore[arg-type]
        scales=parse_scales(fields.get("scales") or "1.0"),
        stages=(fields.get("stages") or "all").strip(),
        stage_threshold=_float(
            "stage_threshold", fields.get("stage_threshold"), DEFAULT_STAGE_THRESHOLD
        ),
    )


def score_threshold(fields: Mapping[str, str], default: float) -> float:
    """The detect form's `score_threshold`, in [0, 1] as `clearsight detect` requires."""
    value = _float("score_threshold", fields.get("score_threshold"), default)
    return check_unit_interval("score_threshold", value)


def flag_true(fields: Mapping[str, str], name: str, default: bool) -> bool:
    """A yes/no field: 1/true/yes/on or 0/false/no/off."""
    text = fields.get(name)
    if text is None or text.strip() == "":
        return default
    key = text.strip().lower()
    if key in ("1", "true", "yes", "on"):
        return True
    if key in ("0", "false", "no", "off"):
        return False
    raise OptionError(name, f"expected true or false, got {text!r}")
