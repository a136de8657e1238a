"""Videos on a Ray cluster (`--engine ray`): the videos among `inputs`, named and checked by
the one output plan (`clearsight.output_plan`), through `clearsight.scale.video_ray`
(docs/scale.md, "Videos")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any


def restore_videos_ray(
    model: str,
    inputs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    keep_container: bool = False,
    **options: Any,
) -> Any:
    """Restore every video of `inputs` (video files, and the videos inside folders) into
    `out` with `model` on Ray actors: `OUT/<name>.mp4` (the source's container with
    `keep_container`), as `restore_video` writes it locally. One video is cut at keyframes
    and restored by all workers at once; several videos run one per worker. `options`:
    `workers`, `segments`, `address`, `overwrite`, `device`, `tile`, `max_pixels`, the
    video options (`codec`, `crf`, `start`, `duration`, `temporal`, `keep_partial`), ...
    of `clearsight.scale.video_ray.restore_videos_ray`. Returns its `VideoSummary`."""
    from clearsight.errors import ClearsightError
    from clearsight.output_plan import plan_run

    plan = plan_run(inputs, out, keep_container=keep_container, plan_images=False)
    if not plan.videos:
        raise ClearsightError(f"no videos among {', '.join(map(str, inputs))}")
    from clearsight.scale.video_ray import restore_videos_ray as run

    return run(model, [(v.source, v.target) for v in plan.videos], out, **options)
