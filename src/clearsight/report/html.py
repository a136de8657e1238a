"""Self-contained HTML reports for `clearsight eval --report` and `clearsight compare --report`.

One file, no network: thumbnails are embedded as base64 JPEG data URIs, the histogram is an
inline SVG drawn here, and the only script is a few lines of vanilla JS (sortable table,
before/after slider). A page shows, top to bottom: the model card(s), the metric preset, the
data set and the summary figures; a histogram of per-image PSNR (or of its change); a table of
every image sortable by any column; and a gallery of thumbnails (every image for small sets,
else the worst and best `k`) with amplified difference maps. Clicking a table row or a
gallery card opens a before/after slider for that image.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.atomic import atomic_write_text
from clearsight.engine.evaluate import EvalResult

if TYPE_CHECKING:
    from clearsight.artifact import LoadedModel
    from clearsight.engine.compare import Comparison

ALL_IMAGES_UP_TO = 24
"""Sets up to this size show every image in the gallery; larger ones the worst and best k."""
DEFAULT_K = 8


# --------------------------------------------------------------------------- pieces


def model_card(loaded: LoadedModel) -> list[tuple[str, str]]:
    """(label, value) rows describing a loaded model, from its artifact config."""
    cfg = loaded.config
    n_params = cfg.param_count or sum(p.numel() for p in loaded.model.parameters())
    pre = cfg.preprocess
    rows = [
        ("name", cfg.name or "-"),
        ("source", loaded.source),
        ("architecture", cfg.architecture),
        ("arguments", json.dumps(cfg.arch_args, sort_keys=True) if cfg.arch_args else "-"),
        ("task", cfg.task),
        ("parameters", f"{n_params:,}"),
        (
            "preprocessing",
            f"{pre.color_order}, range {list(pre.value_range)}, mean {list(pre.mean)}, "
            f"std {list(pre.std)}, resize {pre.resize}, pad multiple {pre.pad_multiple}",
        ),
        ("model's preset", cfg.metric_preset),
    ]
    for key, value in sorted(cfg.provenance.items()):
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        rows.append((f"provenance: {key}", text))
    return rows


def _uri(data: bytes, mime: str = "image/jpeg") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _fmt(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "inf"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return f"{v:.{digits}f}"


def _sort_key(v: float | str) -> str:
    if isinstance(v, str):
        return v
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(float(v))


def histogram_svg(
    values: Sequence[float], label: str, *, bins: int = 20, width: int = 600, height: int = 200
) -> str:
    """An inline SVG histogram of the finite `values` (infinite ones are counted in the title)."""
    finite = [v for v in values if math.isfinite(v)]
    n_inf = len(values) - len(finite)
    pad_l, pad_b, pad_t, pad_r = 40, 34, 10, 10
    plot_w, plot_h = width - pad_l - pad_r, height - pad_b - pad_t
    parts = [
        f'<svg class="hist" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="histogram of {escape(label)}">'
    ]
    if not finite:
        parts.append(
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no finite values</text>'
        )
        parts.append("</svg>")
        return "".join(parts)
    lo, hi = min(finite), max(finite)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    step = (hi - lo) / bins
    counts = [0] * bins
    for v in finite:
        counts[min(bins - 1, int((v - lo) / step))] += 1
    top = max(counts)
    bar_w = plot_w / bins
    for i, c in enumerate(counts):
        h = plot_h * c / top
        x = pad_l + i * bar_w
        y = pad_t + plot_h - h
        a, b = lo + i * step, lo + (i + 1) * step
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - 1, 1):.1f}" height="{h:.1f}" '
            f'fill="#3b7dd8"><title>{a:.2f} to {b:.2f}: {c} image(s)</title></rect>'
        )
    base = pad_t + plot_h
    parts.append(
        f'<line x1="{pad_l}" y1="{base}" x2="{pad_l + plot_w}" y2="{base}" stroke="#444"/>'
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{base}" stroke="#444"/>'
    )
    for frac, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        x = pad_l + plot_w * frac
        parts.append(
            f'<text x="{x:.1f}" y="{base + 14}" text-anchor="{anchor}" font-size="11">'
            f"{lo + (hi - lo) * frac:.2f}</text>"
        )
    parts.append(
        f'<text x="{pad_l - 4}" y="{pad_t + 10}" text-anchor="end" font-size="11">{top}</text>'
        f'<text x="{pad_l - 4}" y="{base}" text-anchor="end" font-size="11">0</text>'
    )
    extra = f" ({n_inf} infinite not shown)" if n_inf else ""
    parts.append(
        f'<text x="{pad_l + plot_w / 2}" y="{height - 4}" text-anchor="middle" font-size="12">'
        f"{escape(label)}, {len(finite)} image(s){escape(extra)}</text></svg>"
    )
    return "".join(parts)


@dataclass
class Column:
    key: str
    label: str
    numeric: bool = True
    digits: int = 3


@dataclass
class GalleryItem:
    """One image's card: labelled thumbnails, a caption, and the slider's two images."""

    name: str
    caption: str
    images: list[tuple[str, bytes]]
    slider: tuple[str, str]
    """Labels (of `images`) shown left (before) and right (after) in the slider."""


@dataclass
class Page:
    title: str
    header_html: str
    histogram: str
    columns: list[Column]
    rows: list[dict[str, Any]]
    gallery: list[GalleryItem] = field(default_factory=list)
    gallery_note: str = ""


def _kv_table(rows: Sequence[tuple[str, str]], cls: str = "card") -> str:
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="{cls}">{body}</table>'


def _stats_table(summary: dict[str, Any], metrics: Sequence[str]) -> str:
    head = "<tr><th>metric</th><th>mean</th><th>median</th><th>min</th><th>max</th></tr>"
    body = []
    for m in metrics:
        s = summary[m]
        d = 3 if m == "psnr" else 4
        cells = "".join(f"<td>{_fmt(s[c], d)}</td>" for c in ("mean", "median", "min", "max"))
        body.append(f"<tr><th>{escape(m)}</th>{cells}</tr>")
    lat = summary["latency_ms"]
    body.append(
        f"<tr><th>latency ms</th><td>{lat['mean']:.1f}</td><td>{lat['median']:.1f}</td>"
        "<td></td><td></td></tr>"
    )
    return f'<table class="stats">{head}{"".join(body)}</table>'


_CSS = """
body{font-family:system-ui,sans-serif;margin:20px;color:#222;background:#fafafa}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;font-size:13px}
table.card th,table.stats th{text-align:left;padding:2px 10px 2px 0;color:#555;font-weight:600}
table.card td,table.stats td{padding:2px 10px;text-align:right}
table.card td{text-align:left;max-width:900px;word-break:break-all}
.top{display:flex;flex-wrap:wrap;gap:30px}
#results th{cursor:pointer;background:#e8eef8;padding:4px 8px;position:sticky;top:0;
user-select:none}
#results th.asc::after{content:" \\25B2"}#results th.desc::after{content:" \\25BC"}
#results td{padding:2px 8px;border-bottom:1px solid #e4e4e4;text-align:right}
#results td.name{text-align:left;font-family:monospace}
#results tr.detail{cursor:pointer}#results tr.detail:hover{background:#fff4cc}
#results tr.detail td.name{color:#1a55b0;text-decoration:underline}
.pos{color:#0a7d28}.neg{color:#b3261e}
.gallery{display:flex;flex-direction:column;gap:14px}
.item{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;cursor:pointer}
.item .cap{font-size:13px;margin-bottom:6px}.item .cap b{font-family:monospace}
.thumbs{display:flex;flex-wrap:wrap;gap:6px}
figure{margin:0;text-align:center;font-size:11px;color:#555}
figure img{display:block;max-width:256px;max-height:256px;border:1px solid #ccc}
#modal{position:fixed;inset:0;background:rgba(0,0,0,.75);display:flex;align-items:center;
justify-content:center;z-index:10}
#modal[hidden]{display:none}
#modal .box{background:#fff;padding:12px;border-radius:8px;max-width:95vw}
#slider{position:relative;display:inline-block;line-height:0;user-select:none}
#slider img{display:block;width:min(80vw,768px);height:auto;image-rendering:auto}
#sl-after-wrap{position:absolute;inset:0;clip-path:inset(0 0 0 50%)}
#sl-line{position:absolute;top:0;bottom:0;left:50%;width:2px;background:#ff0;
box-shadow:0 0 3px #000;pointer-events:none}
.labels{display:flex;justify-content:space-between;font-size:13px;margin:4px 0}
#sl-range{width:100%}
"""

_JS = """
(function(){
  var table=document.getElementById('results');
  var heads=table.tHead.rows[0].cells;
  function cellValue(row,i,num){
    var v=row.cells[i].getAttribute('data-v');
    return num?parseFloat(v):v;
  }
  for(var i=0;i<heads.length;i++){(function(i){
    heads[i].addEventListener('click',function(){
      var num=heads[i].getAttribute('data-num')==='1';
      var asc=!heads[i].classList.contains('asc');
      for(var j=0;j<heads.length;j++){heads[j].classList.remove('asc','desc');}
      heads[i].classList.add(asc?'asc':'desc');
      var body=table.tBodies[0];
      var rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(a,b){
        var x=cellValue(a,i,num),y=cellValue(b,i,num),r;
        if(num){if(isNaN(x))return 1;if(isNaN(y))return -1;r=x===y?0:(x<y?-1:1);}
        else{r=x.localeCompare(y);}
        return asc?r:-r;
      });
      rows.forEach(function(r){body.appendChild(r);});
    });
  })(i);}
  var modal=document.getElementById('modal');
  var range=document.getElementById('sl-range');
  function setSplit(v){
    document.getElementById('sl-after-wrap').style.clipPath='inset(0 0 0 '+v+'%)';
    document.getElementById('sl-line').style.left=v+'%';
    range.value=v;
  }
  window.clearsightSetSplit=setSplit;
  function open(id){
    var card=document.getElementById('item-'+id);
    if(!card){return;}
    var b=card.querySelector('img[data-role=before]'),a=card.querySelector('img[data-role=after]');
    document.getElementById('sl-before').src=b.src;
    document.getElementById('sl-after').src=a.src;
    document.getElementById('sl-left').textContent=b.getAttribute('data-label');
    document.getElementById('sl-right').textContent=a.getAttribute('data-label');
    document.getElementById('sl-title').textContent=card.getAttribute('data-name');
    modal.hidden=false;
    setSplit(50);
  }
  range.addEventListener('input',function(){setSplit(range.value);});
  document.getElementById('sl-close').addEventListener('click',function(){modal.hidden=true;});
  modal.addEventListener('click',function(e){if(e.target===modal){modal.hidden=true;}});
  document.addEventListener('keydown',function(e){if(e.key==='Escape'){modal.hidden=true;}});
  var rows=table.tBodies[0].rows;
  for(var k=0;k<rows.length;k++){(function(r){
    var id=r.getAttribute('data-item');
    if(id!==null){r.addEventListener('click',function(){open(id);});}
  })(rows[k]);}
  var items=document.querySelectorAll('.item');
  for(var m=0;m<items.length;m++){(function(it){
    it.addEventListener('click',function(){open(it.getAttribute('data-id'));});
  })(items[m]);}
})();
"""


def _cell(col: Column, v: Any) -> str:
    if not col.numeric:
        return f'<td class="name" data-v="{escape(str(v))}">{escape(str(v))}</td>'
    if v is None:
        return '<td data-v="NaN"></td>'
    cls = ""
    if col.key.startswith("d_") and math.isfinite(v) and v != 0:
        cls = ' class="pos"' if v > 0 else ' class="neg"'
    return f'<td data-v="{_sort_key(v)}"{cls}>{_fmt(v, col.digits)}</td>'


def render_page(page: Page) -> str:
    """The whole HTML document for `page`."""
    ids = {item.name: i for i, item in enumerate(page.gallery)}
    head = "".join(
        f'<th data-num="{1 if c.numeric else 0}">{escape(c.label)}</th>' for c in page.columns
    )
    body = []
    for row in page.rows:
        i = ids.get(row["name"])
        attr = f' class="detail" data-item="{i}"' if i is not None else ""
        cells = "".join(_cell(c, row.get(c.key)) for c in page.columns)
        body.append(f"<tr{attr}>{cells}</tr>")
    gallery = []
    for i, item in enumerate(page.gallery):
        before, after = item.slider
        figs = []
        for label, data in item.images:
            role = ' data-role="before"' if label == before else ""
            role = ' data-role="after"' if label == after else role
            figs.append(
                f'<figure><img src="{_uri(data)}" alt="{escape(label)}" '
                f'data-label="{escape(label)}"{role}><figcaption>{escape(label)}</figcaption>'
                "</figure>"
            )
        gallery.append(
            f'<div class="item" id="item-{i}" data-id="{i}" data-name="{escape(item.name)}">'
            f'<div class="cap"><b>{escape(item.name)}</b> {escape(item.caption)}</div>'
            f'<div class="thumbs">{"".join(figs)}</div></div>'
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{escape(page.title)}</title>
<style>{_CSS}</style></head>
<body>
<h1>{escape(page.title)}</h1>
{page.header_html}
<h2>Distribution</h2>
{page.histogram}
<h2>Per image (click a column to sort; click a highlighted row for a before/after slider)</h2>
<table id="results"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>
<h2>Gallery</h2>
<p>{escape(page.gallery_note)}</p>
<div class="gallery">{"".join(gallery)}</div>
<div id="modal" hidden><div class="box">
<div class="labels"><b id="sl-title"></b><button id="sl-close" type="button">close</button></div>
<div id="slider"><img id="sl-before" alt="before"><div id="sl-after-wrap">
<img id="sl-after" alt="after"></div><div id="sl-line"></div></div>
<div class="labels"><span id="sl-left"></span><span id="sl-right"></span></div>
<input id="sl-range" type="range" min="0" max="100" step="1" value="50"
 aria-label="before/after split">
</div></div>
<script>{_JS}</script>
</body></html>
"""


def write_report(path: str | Path, html_text: str) -> Path:
    """Write the page atomically (parent folders created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, html_text)
    return p


def _pick(names_by_score: list[str], k: int) -> tuple[list[str], str]:
    """Names shown in the gallery (all for small sets, else worst k then best k)."""
    n = len(names_by_score)
    if n <= max(ALL_IMAGES_UP_TO, 2 * k):
        return names_by_score, f"all {n} images, worst first"
    worst, best = names_by_score[:k], names_by_score[-k:]
    return worst + best, f"the {k} worst and the {k} best of {n} images"


def _psnr_key(v: float) -> float:
    return v if not math.isnan(v) else -math.inf


# --------------------------------------------------------------------------- eval


def render_eval_report(
    result: EvalResult,
    thumbs: dict[str, dict[str, bytes]],
    *,
    card: Sequence[tuple[str, str]] = (),
    k: int = DEFAULT_K,
    title: str | None = None,
) -> str:
    """The report of one evaluation; `thumbs` from a `ThumbnailCollector`."""
    summary = result.summary()
    metrics = result.metric_names
    header = (
        '<div class="top"><div><h2>Model</h2>'
        + _kv_table(list(card) or [("model", result.model)])
        + "</div><div><h2>Evaluation</h2>"
        + _kv_table(
            [
                ("data set", result.data),
                ("images", str(summary["n"])),
                ("metric preset", result.preset.name),
                ("preset description", result.preset.description),
                ("border crop", f"{result.preset.crop_border} px"),
            ]
        )
        + "<h2>Summary</h2>"
        + _stats_table(summary, metrics)
        + "</div></div>"
    )
    columns = [Column("name", "image", numeric=False)]
    columns += [Column(m, m, digits=3 if m == "psnr" else 4) for m in metrics]
    columns.append(Column("latency_ms", "latency ms", digits=1))
    rows = [{"name": r.name, **r.metrics, "latency_ms": r.latency_ms} for r in result.images]
    ranked = sorted(result.images, key=lambda r: _psnr_key(r.metrics.get("psnr", 0.0)))
    names, note = _pick([r.name for r in ranked], k)
    by_name = {r.name: r for r in result.images}
    gallery = []
    for name in names:
        t = thumbs.get(name)
        if t is None:
            continue
        r = by_name[name]
        cap = " · ".join(
            [f"{m} {_fmt(v, 3 if m == 'psnr' else 4)}" for m, v in r.metrics.items()]
            + [f"{r.latency_ms:.1f} ms"]
        )
        gallery.append(
            GalleryItem(
                name=name,
                caption=cap,
                images=[
                    ("input", t["input"]),
                    ("output", t["output"]),
                    ("target", t["target"]),
                    ("|output - target| (amplified)", t["err"]),
                    ("|output - input| (removed, amplified)", t["removed"]),
                ],
                slider=("input", "output"),
            )
        )
    page = Page(
        title=title or f"clearsight eval: {result.model} on {result.data}",
        header_html=header,
        histogram=histogram_svg(
            [r.metrics.get("psnr", math.nan) for r in result.images],
            f"per-image PSNR (dB), preset {result.preset.name}",
        ),
        columns=columns,
        rows=rows,
        gallery=gallery,
        gallery_note=note + "; click a card for the input/output slider",
    )
    return render_page(page)


# --------------------------------------------------------------------------- compare


def render_compare_report(
    cmp: Comparison,
    thumbs_a: dict[str, dict[str, bytes]],
    thumbs_b: dict[str, dict[str, bytes]],
    *,
    card_a: Sequence[tuple[str, str]] = (),
    card_b: Sequence[tuple[str, str]] = (),
    k: int = DEFAULT_K,
) -> str:
    """The report of a comparison: B against A per image (positive deltas: B is better)."""
    s = cmp.summary()
    counts = s["psnr"]
    header = (
        '<div class="top"><div><h2>Model A</h2>'
        + _kv_table(list(card_a) or [("model", cmp.model_a)])
        + "</div><div><h2>Model B</h2>"
        + _kv_table(list(card_b) or [("model", cmp.model_b)])
        + "</div><div><h2>Comparison</h2>"
        + _kv_table(
            [
                ("data set", cmp.data),
                ("images", str(s["n"])),
                ("metric preset", cmp.preset.name),
                ("preset description", cmp.preset.description),
                ("border crop", f"{cmp.preset.crop_border} px"),
                ("B better (PSNR)", str(counts["better"])),
                ("B worse (PSNR)", str(counts["worse"])),
                ("equal (PSNR)", f"{counts['equal']} (within {cmp.tolerance['psnr']:g} dB)"),
                ("mean PSNR A", _fmt(s["mean_a"]["psnr"])),
                ("mean PSNR B", _fmt(s["mean_b"]["psnr"])),
                ("mean delta PSNR (B - A)", _fmt(counts["mean_delta"])),
            ]
        )
        + "</div></div>"
    )
    metrics = cmp.metric_names
    columns = [Column("name", "image", numeric=False)]
    for m in metrics:
        d = 3 if m == "psnr" else 4
        columns += [Column(f"a_{m}", f"A {m}", digits=d), Column(f"b_{m}", f"B {m}", digits=d)]
        columns.append(Column(f"d_{m}", f"delta {m}", digits=d))
    columns += [Column("a_ms", "A ms", digits=1), Column("b_ms", "B ms", digits=1)]
    rows = []
    for d in cmp.deltas:
        row: dict[str, Any] = {"name": d.name, "a_ms": d.latency_a, "b_ms": d.latency_b}
        for m in metrics:
            row[f"a_{m}"], row[f"b_{m}"], row[f"d_{m}"] = d.a[m], d.b[m], d.delta[m]
        rows.append(row)
    ranked = sorted(cmp.deltas, key=lambda d: _psnr_key(d.delta.get("psnr", 0.0)))
    names, note = _pick([d.name for d in ranked], k)
    note = note.replace("worst", "largest losses").replace("best", "largest gains")
    by_name = {d.name: d for d in cmp.deltas}
    gallery = []
    for name in names:
        ta, tb = thumbs_a.get(name), thumbs_b.get(name)
        if ta is None or tb is None:
            continue
        d = by_name[name]
        cap = (
            f"PSNR A {_fmt(d.a['psnr'])} · B {_fmt(d.b['psnr'])} · delta "
            f"{_fmt(d.delta['psnr'])} dB · A {d.latency_a:.1f} ms · B {d.latency_b:.1f} ms"
        )
        gallery.append(
            GalleryItem(
                name=name,
                caption=cap,
                images=[
                    ("input", ta["input"]),
                    ("A output", ta["output"]),
                    ("B output", tb["output"]),
                    ("target", ta["target"]),
                    ("|A - target| (amplified)", ta["err"]),
                    ("|B - target| (amplified)", tb["err"]),
                ],
                slider=("A output", "B output"),
            )
        )
    page = Page(
        title=f"clearsight compare: {cmp.model_a} vs {cmp.model_b} on {cmp.data}",
        header_html=header,
        histogram=histogram_svg(
            [d.delta.get("psnr", math.nan) for d in cmp.deltas],
            f"per-image PSNR change B - A (dB), preset {cmp.preset.name}",
        ),
        columns=columns,
        rows=rows,
        gallery=gallery,
        gallery_note=note + "; click a card for the A/B slider",
    )
    return render_page(page)
