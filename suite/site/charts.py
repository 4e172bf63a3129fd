"""Charts for the website: altair (Vega-Lite) specifications rendered to inline SVG by vl-convert.

Each function takes plain numbers already read from the run records and returns an SVG string
that the page embeds as is: no script, no network, readable from disk. Every chart has a title,
axis titles with their units, and a colour per arm. The SVG text is produced by vl-convert, which
escapes every label, so arm or metric names cannot inject markup. A chart with no data returns
None and the page says so instead.

Speed (a site of 1,000 runs renders dozens of charts): the figures are aggregated here (quartiles,
a bounded number of ticks), the chart only draws; the data travel as named datasets added to the
finished specification, so altair never copies them; and altair's per-object schema validation
is left to the renderer, which rejects an invalid specification anyway.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from typing import Any

import altair as alt
import vl_convert as vlc
from altair.utils import schemapi

from suite.analysis.stats import percentile
from suite.sanitize import printable_any

log = logging.getLogger(__name__)

WIDTH = 520
HEIGHT = 200
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
TRIP = "#b00020"

schemapi.disable_debug_mode()


def _config(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    return (
        chart.configure(font=FONT, background="white")
        .configure_title(fontSize=14, anchor="start", subtitleFontSize=11, subtitleColor="#555")
        .configure_axis(labelFontSize=11, titleFontSize=12)
        .configure_legend(labelFontSize=11, titleFontSize=11, orient="bottom")
        .configure_view(strokeWidth=0)
    )


def spec_of(chart: alt.TopLevelMixin) -> str:
    """The chart's Vega-Lite specification (JSON), with the site's fonts and sizes."""
    return json.dumps(_config(chart).to_dict(validate=False))


def render(spec_json: str, datasets: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """A specification as an SVG string for inline use; `datasets` fill its named data sources.

    Every string of both goes through `printable` first: the renderer aborts the whole process (a
    panic that cannot unwind) on a control character in a label, and a record's text may hold one."""
    spec = json.loads(spec_json)
    if datasets:
        spec["datasets"] = {**spec.get("datasets", {}), **datasets}
    svg = vlc.vegalite_to_svg(printable_any(spec))
    if svg.startswith("<?xml"):
        svg = svg.split("?>", 1)[1]
    return svg.strip()


def warm_up() -> None:
    """Start the renderer's engine (about half a second, once per process) with a tiny chart."""
    vlc.vegalite_to_svg({"data": {"values": [{"x": 0}]}, "mark": "point", "encoding": {"x": {"field": "x"}}})


def _box_rows(samples: dict[str, list[float]], scale: float) -> list[dict[str, Any]]:
    """Per arm: min, quartiles, median and max, computed here (the chart draws, never aggregates)."""
    rows = []
    for arm, values in samples.items():
        xs = [v * scale for v in values if v is not None]
        if xs:
            rows.append({"arm": arm, "min": min(xs), "q1": percentile(xs, 25), "median": percentile(xs, 50),
                         "q3": percentile(xs, 75), "max": max(xs), "n": len(xs)})
    return rows


def _tick_rows(samples: dict[str, list[float]], scale: float, max_ticks: int) -> list[dict[str, Any]]:
    """The observations as ticks; above `max_ticks` per arm, evenly spaced quantiles stand for them."""
    rows = []
    for arm, values in samples.items():
        xs = sorted(v * scale for v in values if v is not None)
        if len(xs) > max_ticks:
            xs = [xs[round(i * (len(xs) - 1) / (max_ticks - 1))] for i in range(max_ticks)]
        rows += [{"arm": arm, "value": x} for x in xs]
    return rows


def distribution(samples: dict[str, list[float]], *, title: str, axis: str, scale: float = 1.0,
                 subtitle: str | None = None, max_ticks: int = 200) -> str | None:
    """One row per arm: a tick per observation over a box (min, quartiles, median, max)."""
    boxes = _box_rows(samples, scale)
    if not boxes:
        return None
    spec = _distribution_spec(tuple(b["arm"] for b in boxes), title, axis, subtitle)
    return render(spec, {"boxes": boxes, "ticks": _tick_rows(samples, scale, max_ticks)})


@lru_cache(maxsize=64)
def _distribution_spec(order: tuple[str, ...], title: str, axis: str, subtitle: str | None) -> str:
    y = alt.Y("arm:N", title=None, sort=list(order))
    color = alt.Color("arm:N", legend=None, sort=list(order))
    box_data, tick_data = alt.Data(name="boxes"), alt.Data(name="ticks")
    whisker = alt.Chart(box_data).mark_rule(color="#888").encode(
        x=alt.X("min:Q", title=axis, scale=alt.Scale(zero=False)), x2="max:Q", y=y)
    box = alt.Chart(box_data).mark_bar(size=16, opacity=0.3).encode(x="q1:Q", x2="q3:Q", y=y, color=color)
    median = alt.Chart(box_data).mark_tick(size=20, thickness=2.5, color="black").encode(x="median:Q", y=y)
    ticks = alt.Chart(tick_data).mark_tick(thickness=1.2, size=12, opacity=0.8).encode(
        x="value:Q", y=y, color=color)
    props: dict[str, Any] = {"text": title}
    if subtitle:
        props["subtitle"] = subtitle
    return spec_of(alt.layer(whisker, box, ticks, median).properties(
        title=alt.TitleParams(**props), width=WIDTH, height=max(60, 38 * len(order))))


def ttft_distribution(samples_s: dict[str, list[float]]) -> str | None:
    """Time to first token of each streamed request, per arm, in milliseconds."""
    return distribution(samples_s, title="Time to first token", axis="TTFT (ms)", scale=1000.0,
                        subtitle="one tick per streamed request; bar: quartiles; black: median; line: min to max")


def itl_distribution(samples_s: dict[str, list[float]]) -> str | None:
    """Inter-token latency (gaps between streamed chunks), per arm, in milliseconds."""
    return distribution(samples_s, title="Inter-token latency", axis="gap between tokens (ms)", scale=1000.0,
                        subtitle="gaps between consecutive streamed chunks (up to 200 quantiles shown); "
                                 "bar: quartiles; black: median")


SWEEP_PANELS = (("ttft_p50_ms", "TTFT p50 (ms)"), ("itl_p50_ms", "inter-token p50 (ms)"),
                ("tokens_per_s", "tokens/s (all streams)"))


def concurrency_sweep(sweeps: dict[str, list[dict[str, Any]]]) -> str | None:
    """TTFT, inter-token latency and aggregate throughput against concurrency, one line per arm.

    `sweeps` maps an arm to its rows (`suite.stages.latency.view.latency_sweep`). A level where the suite's
    client was saturated is drawn as a red cross, not a dot: that point describes the client.
    None when no arm measured more than one level.
    """
    rows = []
    for arm, levels in sweeps.items():
        for lv in levels:
            for key, _ in SWEEP_PANELS:
                v = lv.get(key)
                if v is not None and lv.get("concurrency"):
                    rows.append({"arm": arm, "concurrency": lv["concurrency"], "metric": key, "value": v,
                                 "client": "saturated" if lv.get("saturated") else "kept up"})
    if not any(len({lv.get("concurrency") for lv in levels}) > 1 for levels in sweeps.values()):
        return None
    return render(_sweep_spec(tuple(sweeps)), {"sweep": rows})


@lru_cache(maxsize=64)
def _sweep_spec(order: tuple[str, ...]) -> str:
    data = alt.Data(name="sweep")
    panels = []
    for key, axis in SWEEP_PANELS:
        base = alt.Chart(data).transform_filter(alt.datum.metric == key).encode(
            x=alt.X("concurrency:Q", title="requests in flight", scale=alt.Scale(type="log", base=2)),
            # a rate's axis starts at zero (a ratio of two heights is then the ratio of the rates)
            y=alt.Y("value:Q", title=axis, scale=alt.Scale(zero=key == "tokens_per_s")),
            color=alt.Color("arm:N", sort=list(order), title="arm"))
        line = base.mark_line(strokeWidth=1.5)
        dots = base.mark_point(filled=True, size=60).encode(
            shape=alt.Shape("client:N", title="suite's client", scale=alt.Scale(
                domain=["kept up", "saturated"], range=["circle", "cross"])),
            stroke=alt.condition(alt.datum.client == "saturated", alt.value(TRIP), alt.value(None)))
        panels.append(alt.layer(line, dots).properties(width=250, height=HEIGHT))
    return spec_of(alt.hconcat(*panels).properties(title=alt.TitleParams(
        text="Latency against concurrency",
        subtitle="per level: medians over requests (inter-token: over gaps); a cross: the suite's client was "
                 "saturated there, so that point describes the client, not the runtime")))


class MemorySeries:
    """One arm's watchdog timeline: sample times (s), readings by metric (bytes), the trip if any."""

    def __init__(self, arm: str, t_s: list[float], metrics: dict[str, list[float | None]],
                 trip_t_s: float | None = None, threshold_bytes: float | None = None,
                 launch: list[int] | None = None):
        self.arm = arm
        self.t_s = t_s
        self.metrics = metrics
        self.trip_t_s = trip_t_s
        self.threshold_bytes = threshold_bytes
        self.launch = launch if launch is not None else [0] * len(t_s)  # per sample, its launch

    def rows(self) -> list[dict[str, Any]]:
        """One row per sample and reading, with its launch: each launch's line is drawn apart."""
        return [{"t": t, "reading": name, "gib": v / 2**30, "launch": k}
                # a record's series cut short (an interrupted run) is drawn as far as all three go
                for name, values in self.metrics.items() for t, v, k in zip(self.t_s, values, self.launch, strict=False)
                if v is not None]


def memory_timelines(series: list[MemorySeries], width: int = 1180) -> str | None:
    """The memory timeline of every arm, one panel per arm side by side, on one GiB scale."""
    datasets: dict[str, list[dict[str, Any]]] = {}
    shown = [s for s in series if s.rows()]
    if not shown:
        return None
    layout = []
    for i, s in enumerate(shown):
        datasets[f"mem{i}"] = s.rows()
        if s.threshold_bytes is not None:
            datasets[f"limit{i}"] = [{"gib": s.threshold_bytes / 2**30}]
        if s.trip_t_s is not None:
            datasets[f"trip{i}"] = [{"t": s.trip_t_s}]
        layout.append((s.arm, s.threshold_bytes is not None, s.trip_t_s is not None))
    return render(_memory_spec(tuple(layout), width), datasets)


@lru_cache(maxsize=64)
def _memory_spec(layout: tuple[tuple[str, bool, bool], ...], width: int) -> str:
    panel_width = max(220, min(WIDTH, width // len(layout) - 90))
    panels = []
    for i, (arm, limit, trip) in enumerate(layout):
        layers: list[alt.Chart] = [
            alt.Chart(alt.Data(name=f"mem{i}")).mark_line(interpolate="step-after", strokeWidth=1.5).encode(
                x=alt.X("t:Q", title="time since the watchdog started (s)"),
                y=alt.Y("gib:Q", title="memory (GiB)"),
                color=alt.Color("reading:N", title="reading"),
                detail=alt.Detail("launch:N"))]
        if limit:
            layers.append(alt.Chart(alt.Data(name=f"limit{i}")).mark_rule(color=TRIP, strokeDash=[4, 3])
                          .encode(y="gib:Q"))
        if trip:
            layers.append(alt.Chart(alt.Data(name=f"trip{i}")).mark_rule(color=TRIP).encode(x="t:Q"))
        panels.append(alt.layer(*layers).properties(title=arm, width=panel_width, height=HEIGHT))
    return spec_of(alt.hconcat(*panels).resolve_scale(y="shared").properties(title=alt.TitleParams(
        text="Memory timeline per arm",
        subtitle="watchdog samples (GiB) of every launch of the arm (restarts, sessions and control rows after the main one, "
                 "on one time axis), one line per launch, never joined across launches; red: trip threshold and trip time")))


def cost_scatter(points: dict[str, dict[str, float | None]]) -> str | None:
    """Each arm's gate tokens/s against its J/token (the same requests, one at a time), one point per
    arm, filled where the arm gave one answer per prompt: the speed and energy a reproducible
    answer costs, across the arms of a model. None where fewer than two arms have both figures."""
    def word(one: float | bool | None) -> str:
        return "undetermined" if one is None else ("yes" if one else "no")

    rows = [{"arm": arm, "tokens_per_s": f["tokens_per_s"], "j_per_token": f["j_per_token"],
             "same answer twice": word(f.get("one_answer"))}
            for arm, f in points.items() if f.get("tokens_per_s") and f.get("j_per_token")]
    if len(rows) < 2:
        return None
    missing = tuple(arm for arm in points if arm not in {r["arm"] for r in rows})
    return render(_cost_spec(tuple(r["arm"] for r in rows), missing), {"cost": rows})


@lru_cache(maxsize=64)
def _cost_spec(order: tuple[str, ...], missing: tuple[str, ...]) -> str:
    base = alt.Chart(alt.Data(name="cost")).encode(
        # the arms sit close together: the axes span their points (padded), not zero
        x=alt.X("tokens_per_s:Q", title="tokens/s (the gate, one request at a time)",
                scale=alt.Scale(zero=False, padding=24)),
        y=alt.Y("j_per_token:Q", title="J/token", scale=alt.Scale(zero=False, padding=24)),
        color=alt.Color("arm:N", sort=list(order), title="arm"))
    dots = base.mark_point(size=120, strokeWidth=2).encode(
        shape=alt.Shape("same answer twice:N", title="same answer twice?", scale=alt.Scale(
            domain=["yes", "no", "undetermined"], range=["circle", "cross", "triangle"])))
    subtitle = ("lower right is faster and cheaper; the axes do not start at zero; the shape: whether the arm "
                "gave one answer per prompt")
    if missing:
        subtitle += f"; no energy reading: {', '.join(missing)}"
    return spec_of(dots.properties(width=WIDTH, height=HEIGHT + 60, title=alt.TitleParams(
        text="Speed against energy, per arm", subtitle=subtitle)))

