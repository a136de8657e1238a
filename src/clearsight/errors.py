"""User-facing errors.

Every error a user can cause (bad file, bad argument, unknown name) is a `ClearsightError`
with a one-line message that names the file or argument. The CLI prints the message and exits
non-zero without a traceback; anything else is a bug and keeps its traceback.
"""


class ClearsightError(Exception):
    """An error caused by input, reported to the user as one line."""


class ImageReadError(ClearsightError):
    """An image file is missing, unreadable, corrupt or too large."""


class ImageWriteError(ClearsightError):
    """An image could not be written."""


class PairingError(ClearsightError):
    """Paired data does not match up (unmatched names, differing sizes)."""


class UnknownNameError(ClearsightError):
    """An unknown model, architecture or metric preset was asked for."""


class ArtifactError(ClearsightError):
    """A model artifact is missing, corrupt or of an unsupported version."""


class OptionError(ClearsightError, ValueError):
    """A bad option value; `option` names it (Python spelling, e.g. "stage_threshold").

    Raised once, where the option is validated (`InferenceOptions`); the CLI prints it as
    `--option: detail` with its own flag name.
    """

    def __init__(self, option: str, detail: str) -> None:
        super().__init__(f"{option}: {detail}")
        self.option = option
        self.detail = detail


def check_whole_number(option: str, value: object, low: int = 1) -> None:
    """An OptionError naming `option` unless `value` is an int (not a bool) >= `low`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise OptionError(option, f"must be a whole number >= {low}, got {value!r}")


def check_unit_interval(option: str, value: object) -> float:
    """An OptionError naming `option` unless `value` is a number in [0, 1] (a score
    threshold); checked where a run starts, so a bad one is not a failure per input."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise OptionError(option, f"must be in [0, 1], got {value!r}")
    return float(value)


class ModelOutputError(ClearsightError):
    """A model returned a tensor of the wrong shape for its input (batch, channels, size)."""


class VideoReadError(ClearsightError):
    """A video (or folder of numbered frames) is missing, unreadable, truncated or too large."""


class VideoWriteError(ClearsightError):
    """A video could not be written (container cannot hold a codec, encoder failed)."""
