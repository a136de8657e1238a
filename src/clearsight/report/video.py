"""The HTML report of `clearsight eval --video`: one clip, frame by frame.

The page is one HTML file in the style of the image report (`report/html.py`): the model's
card and the clip's summary (PSNR, SSIM and warping error means, preset, clip), the
per-frame PSNR of the restored frames beside that of the input frames as an inline SVG
plot (and the warping error per frame as a second one), a strip of a few evenly spaced
frames (input, restored, clean and the amplified error, as JPEG data URIs), and a
before/after player: the input and the restored clip as two H.264 files written beside
the page (`<page stem>-input.mp4`, `<page stem>-restored.mp4`), played in step by a few
lines of JS. A browser plays few of the containers FFmpeg reads, so the input is
re-encoded too, on the same clock as the restored clip. docs/video.md.

`VideoReportCollector` is the evaluator's `on_start`/`on_frame` observer: it encodes the
two player videos as the frames stream past and keeps thumbnails of a bounded number of
frames (the stride between kept frames doubles as the clip grows), so memory does not grow
with the clip's length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from clearsight.atomic import ClosedOrAborted
from clearsight.errors import VideoReadError, check_whole_number
from clearsight.metrics.image_metrics import psnr
from clearsight.metrics.presets import PEAK, get_preset
from clearsight.out_paths import check_output_file
from clearsight.report.html import _CSS, _fmt, _kv_table, _uri
from clearsight.report.thumbs import amplified_diff, encode_jpeg, shrink
from clearsight.video.evaluate import ClipFrame, VideoEvalResult
from clearsight.video.io import VideoWriter

if TYPE_CHECKING:
    from clearsight.artifact import LoadedModel

DEFAULT_STRIP = 6
"""Frames in the strip."""
_KEEP = 4
"""Thumbnails kept while streaming: up to `_KEEP * strip` frames, then every other one."""
THUMB_SIDE = 192


def player_paths(page: Path) -> tuple[Path, Path]:
    """The input and restored clips the page at `page` plays (beside it)."""
    return (
        page.with_name(f"{page.stem}-input.mp4"),
        page.with_name(f"{page.stem}-restored.mp4"),
    )


@dataclass
class _Thumbs:
    name: str
    images: list[tuple[str, bytes]] = field(default_factory=list)


class VideoReportCollector(ClosedOrAborted):
    """Collects what the report of one clip shows while `evaluate_video` runs: the player's
    two videos (encoded as the frames come), the input frames' PSNR under `preset`, and the
    thumbnails of evenly spaced frames. Use as a context manager: on success the videos are
    put in place, on failure removed."""

    def __init__(
        self,
        page: str | Path,
        *,
        preset: str = "y-matlab",
        strip: int = DEFAULT_STRIP,
        crf: int | None = None,
    ) -> None:
        self.page = check_output_file(page, "report")
        check_whole_number("strip", strip)
        self.preset = get_preset(preset)
        self.strip = strip
        self.crf = crf
        self.rate: Fraction = Fraction(25)
        self.total: int | None = None
        self.frames = 0
        self.input_psnr: list[float] = []
        self.stride = 1
        self.kept: dict[int, _Thumbs] = {}
        self.videos = player_paths(self.page)
        self._writers: list[VideoWriter] = []
        self.size: tuple[int, int] = (0, 0)

    # -- the evaluator's hooks -----------------------------------------------------------
    def start(self, total: int | None, rate: Fraction) -> None:
        self.total, self.rate = total, Fraction(rate)

    def __call__(self, f: ClipFrame) -> None:
        if not self._writers:
            h, w = f.input.shape[:2]
            self.size = (w, h)
            self.page.parent.mkdir(parents=True, exist_ok=True)
            for path in self.videos:
                self._writers.append(
                    VideoWriter(path, width=w, height=h, time_base=1 / self.rate,
                                rate=self.rate, crf=self.crf)
                )  # fmt: skip
        for what, img in (("input", f.input), ("restored", f.restored)):
            if (img.shape[1], img.shape[0]) != self.size:
                raise VideoReadError(
                    f"frame {f.name}: the {what} frame is {img.shape[1]}x{img.shape[0]}, the "
                    f"first was {self.size[0]}x{self.size[1]}; a clip's frames share one size"
                )
        for writer, img in zip(self._writers, (f.input, f.restored), strict=True):
            writer.write(np.ascontiguousarray(img), f.index)
        if f.clean is not None:
            same = f.input.shape == f.clean.shape
            p = self.preset
            value = psnr(p.prepare(f.input), p.prepare(f.clean), PEAK) if same else math.nan
            self.input_psnr.append(value)
        self.frames = f.index + 1
        if f.index % self.stride == 0:
            self.kept[f.index] = self._thumbs(f)
            while len(self.kept) > _KEEP * self.strip:
                self.stride *= 2
                self.kept = {i: t for i, t in self.kept.items() if i % self.stride == 0}

    def _thumbs(self, f: ClipFrame) -> _Thumbs:
        def enc(img: np.ndarray) -> bytes:
            return encode_jpeg(shrink(img, THUMB_SIDE))

        t = _Thumbs(f.name, [("input", enc(f.input)), ("restored", enc(f.restored))])
        if f.clean is not None:
            t.images.append(("clean", enc(f.clean)))
            if f.clean.shape == f.restored.shape:
                t.images.append(("|restored - clean| x4", enc(amplified_diff(f.restored, f.clean))))
        return t

    # -- the files -----------------------------------------------------------------------
    def strip_frames(self) -> list[tuple[int, _Thumbs]]:
        """Up to `strip` kept frames, evenly spaced over the clip (first and last included)."""
        if not self.kept:
            return []
        kept = sorted(self.kept)
        n = self.strip
        wanted = [round(j * (self.frames - 1) / (n - 1)) for j in range(n)] if n > 1 else [0]
        chosen: list[int] = []
        for w in wanted:
            best = min(kept, key=lambda i: (abs(i - w), i))
            if best not in chosen:
                chosen.append(best)
        return [(i, self.kept[i]) for i in chosen]

    def close(self) -> None:
        try:
            for w in self._writers:
                w.close()
        except BaseException as exc:
            self.abort(exc)
            raise

    def abort(self, exc: BaseException | None = None) -> None:
        for w in self._writers:
            w.abort(exc)


# --------------------------------------------------------------------------- the plot


@dataclass
class Series:
    """One line of a plot: a value per frame (None where there is none)."""

    label: str
    values: Sequence[float | None]
    color: str
    cls: str


def line_plot_svg(
    series: Sequence[Series],
    label: str,
    *,
    unit: str = "",
    width: int = 760,
    height: int = 220,
    digits: int = 2,
) -> str:
    """An inline SVG plot of per-frame values: a line and one circle (with its value as a
    tooltip) per finite value; frames without one (None, NaN, inf) leave a gap."""
    pad_l, pad_r, pad_t, pad_b = 58, 12, 10, 38
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b
    finite = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    n = max((len(s.values) for s in series), default=0)
    parts = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}">'
    ]
    if not finite:
        parts.append(
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no values</text></svg>'
        )
        return "".join(parts)
    lo, hi = min(finite), max(finite)
    if hi - lo < 1e-12:
        lo, hi = lo - max(abs(lo) * 0.05, 0.5e-6), hi + max(abs(hi) * 0.05, 0.5e-6)

    def x(i: int) -> float:
        return pad_l + (pw * i / (n - 1) if n > 1 else pw / 2)

    def y(v: float) -> float:
        return pad_t + ph * (hi - v) / (hi - lo)

    base = pad_t + ph
    parts.append(
        f'<line x1="{pad_l}" y1="{base}" x2="{pad_l + pw}" y2="{base}" stroke="#444"/>'
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{base}" stroke="#444"/>'
    )
    for v in (lo, (lo + hi) / 2, hi):
        parts.append(
            f'<text x="{pad_l - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">'
            f"{v:.{digits}f}</text>"
        )
    for i in sorted({0, (n - 1) // 2, n - 1}):
        parts.append(
            f'<text x="{x(i):.1f}" y="{base + 14}" text-anchor="middle" font-size="11">'
            f"{i + 1}</text>"
        )
    for s in series:
        runs: list[list[str]] = [[]]
        dots = []
        for i, v in enumerate(s.values):
            if v is None or not math.isfinite(v):
                runs.append([])
                continue
            runs[-1].append(f"{x(i):.1f},{y(v):.1f}")
            dots.append(
                f'<circle class="{s.cls}" cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.5" '
                f'fill="{s.color}" data-frame="{i}"><title>frame {i + 1}: {s.label} '
                f"{v:.{digits + 2}f}{escape(unit)}</title></circle>"
            )
        for run in runs:
            if len(run) > 1:
                parts.append(
                    f'<polyline fill="none" stroke="{s.color}" stroke-width="1.5" '
                    f'points="{" ".join(run)}"/>'
                )
        parts += dots
    legend = " · ".join(f'<tspan fill="{s.color}">\u25cf</tspan> {escape(s.label)}' for s in series)
    parts.append(
        f'<text x="{pad_l + pw / 2}" y="{height - 6}" text-anchor="middle" font-size="12">'
        f"{escape(label)} by frame: {legend}</text></svg>"
    )
    return "".join(parts)


# --------------------------------------------------------------------------- the page

_VIDEO_CSS = """
.player{display:flex;flex-wrap:wrap;gap:10px}
.player figure video{display:block;width:min(46vw,640px);height:auto;background:#000}
.strip{display:flex;flex-direction:column;gap:10px}
.frame{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;cursor:pointer}
.frame .cap{font-size:13px;margin-bottom:6px}.frame .cap b{font-family:monospace}
"""

_PLAYER_JS = """
(function(){
  var a=document.getElementById('play-input'),b=document.getElementById('play-restored');
  function follow(src,dst){
    src.addEventListener('play',function(){if(dst.paused){dst.play();}});
    src.addEventListener('pause',function(){if(!dst.paused){dst.pause();}});
    src.addEventListener('seeked',function(){
      if(Math.abs(dst.currentTime-src.currentTime)>0.02){dst.currentTime=src.currentTime;}
    });
    src.addEventListener('ratechange',function(){dst.playbackRate=src.playbackRate;});
  }
  follow(a,b);follow(b,a);
  a.addEventListener('timeupdate',function(){
    if(!a.paused&&Math.abs(b.currentTime-a.currentTime)>0.1){b.currentTime=a.currentTime;}
  });
  var frames=document.querySelectorAll('.frame');
  for(var i=0;i<frames.length;i++){(function(f){
    f.addEventListener('click',function(){
      a.pause();a.currentTime=parseFloat(f.getAttribute('data-time'));
      a.scrollIntoView({behavior:'smooth'});
    });
  })(frames[i]);}
})();
"""


def _mean(values: Sequence[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def _summary_value(summary: dict[str, Any], key: str) -> float | None:
    value = summary.get(key)
    return value.get("mean") if isinstance(value, dict) else None


def render_video_report(
    result: VideoEvalResult,
    collector: VideoReportCollector,
    *,
    model: str,
    clip: str,
    card: Sequence[tuple[str, str]] = (),
    title: str | None = None,
) -> str:
    """The report page of one clip; `collector` is the one that watched the evaluation."""
    s = result.summary
    rows = result.rows
    scored = "psnr" in rows[0] if rows else False
    facts = [("clip", clip), ("frames", str(s.get("frames", len(rows))))]
    facts.append(("player frame rate", f"{float(collector.rate):g} fps"))
    if scored:
        facts += [
            ("metric preset", collector.preset.summary),
            ("psnr.mean (dB)", _fmt(_summary_value(s, "psnr"), 3)),
            ("ssim.mean", _fmt(_summary_value(s, "ssim"), 4)),
            ("warping_error.mean (x1e-3)", _x1e3(_summary_value(s, "warping_error"))),
            ("input psnr.mean (dB)", _fmt(_mean(collector.input_psnr), 3)),
        ]
    else:
        facts.append(("flicker.mean (x1e-3)", _x1e3(_summary_value(s, "flicker"))))
    header = (
        '<div class="top"><div><h2>Model</h2>'
        + _kv_table(list(card) or [("model", model)])
        + "</div><div><h2>Summary</h2>"
        + _kv_table(facts)
        + "</div></div>"
    )
    plots = _plots(rows, collector, scored)
    input_mp4, restored_mp4 = (p.name for p in collector.videos)
    player = (
        '<div class="player">'
        f'<figure><video id="play-input" src="{escape(input_mp4)}" controls muted playsinline '
        'preload="auto"></video><figcaption>input</figcaption></figure>'
        f'<figure><video id="play-restored" src="{escape(restored_mp4)}" controls muted '
        'playsinline preload="auto"></video><figcaption>restored</figcaption></figure></div>'
    )
    strip = []
    for i, t in collector.strip_frames():
        row = rows[i] if i < len(rows) else {}
        cap = f"frame {i + 1}"
        if scored:
            cap += f" · PSNR {_fmt(row.get('psnr'), 3)} dB · SSIM {_fmt(row.get('ssim'), 4)}"
            if i < len(collector.input_psnr):
                cap += f" · input PSNR {_fmt(collector.input_psnr[i], 3)} dB"
        figs = "".join(
            f'<figure><img class="strip-img" src="{_uri(data)}" alt="{escape(label)}">'
            f"<figcaption>{escape(label)}</figcaption></figure>"
            for label, data in t.images
        )
        time = (i + 0.5) / float(collector.rate)  # mid-frame: the seek lands on it
        strip.append(
            f'<div class="frame" data-frame="{i}" data-time="{time:.4f}">'
            f'<div class="cap"><b>{escape(t.name)}</b> {escape(cap)}</div>'
            f'<div class="thumbs">{figs}</div></div>'
        )
    page_title = title or f"clearsight eval --video: {model} on {clip}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{escape(page_title)}</title>
<style>{_CSS}{_VIDEO_CSS}</style></head>
<body>
<h1>{escape(page_title)}</h1>
{header}
<h2>Per frame</h2>
{plots}
<h2>Before / after (the two play and seek together)</h2>
{player}
<p>{escape(input_mp4)} and {escape(restored_mp4)}, beside this page: H.264 at
{float(collector.rate):g} fps, one frame per frame of the clip.</p>
<h2>Frames (click one to seek the player there)</h2>
<div class="strip">{"".join(strip)}</div>
<script>{_PLAYER_JS}</script>
</body></html>
"""


def _x1e3(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.3f}"


def _plots(rows: list[dict[str, Any]], collector: VideoReportCollector, scored: bool) -> str:
    if not scored:
        flick = [r.get("flicker") for r in rows]
        return line_plot_svg(
            [Series("restored", [_scaled(v) for v in flick], "#3b7dd8", "flicker")],
            "flicker (x1e-3, flow from the input)",
            digits=3,
        )
    psnr_plot = line_plot_svg(
        [
            Series("restored", [r.get("psnr") for r in rows], "#3b7dd8", "psnr-restored"),
            Series("input", collector.input_psnr, "#b3261e", "psnr-input"),
        ],
        f"PSNR (dB), preset {collector.preset.name}",
        unit=" dB",
    )
    warp = [_scaled(r.get("warping_error")) for r in rows]
    warp_plot = line_plot_svg(
        [Series("restored", warp, "#3b7dd8", "warping-error")],
        "warping error (x1e-3, flow from the clean frames)",
        height=160,
        digits=3,
    )
    return psnr_plot + "<br>" + warp_plot


def _scaled(v: float | None) -> float | None:
    return None if v is None else v * 1e3


def write_video_report(
    result: VideoEvalResult,
    collector: VideoReportCollector,
    *,
    model: Any,
    pairs: Any,
    loaded: LoadedModel | None = None,
) -> Path:
    """Render the page of `evaluate_video(model, pairs)` and write it atomically at
    `collector.page` (with `loaded`'s card); returns its path."""
    from clearsight.report.html import model_card, write_report

    if isinstance(pairs, tuple | list):
        clip = " and ".join(str(p) for p in pairs if p is not None)
    else:
        clip = str(pairs)
    if isinstance(model, str | Path):
        name = str(model)
    elif loaded is not None:
        name = loaded.config.name or str(loaded.source)
    else:
        name = type(model).__name__
    card = model_card(loaded) if loaded is not None else ()
    page = render_video_report(result, collector, model=name, clip=clip, card=card)
    return write_report(collector.page, page)


__all__ = [
    "VideoReportCollector",
    "line_plot_svg",
    "player_paths",
    "render_video_report",
    "write_video_report",
]
