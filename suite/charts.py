"""Charts for the website: altair (Vega-Lite) specifications rendered to inline SVG by vl-convert.

Each function takes plain numbers already read from the run records and returns an SVG string
that the page embeds as is: no script, no network, readable from disk. Every chart has a title,
axis titles with their units, and a colour per arm. The SVG text is produced by vl-convert, which
escapes every label, so arm or metric names cannot inject markup. A chart with no data returns
None and the page says so instead.
"""

from __future__ import annotations

import logging
from typing import Any

import altair as alt
import vl_convert as vlc

log = logging.getLogger(__name__)

WIDTH = 520
HEIGHT = 200
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


def _config(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    return (
        chart.configure(font=FONT, background="white")
        .configure_title(fontSize=14, anchor="start", subtitleFontSize=11, subtitleColor="#555")
        .configure_axis(labelFontSize=11, titleFontSize=12)
        .configure_legend(labelFontSize=11, titleFontSize=11, orient="bottom")
        .configure_view(strokeWidth=0)
    )


def render(chart: alt.TopLevelMixin) -> str:
    """The chart as an SVG document string (the XML prolog removed, for inline use)."""
    svg = vlc.vegalite_to_svg(_config(chart).to_dict(validate=False))
    if svg.startswith("<?xml"):
        svg = svg.split("?>", 1)[1]
    return svg.strip()


def _rows(samples: dict[str, list[float]], scale: float = 1.0) -> list[dict[str, Any]]:
    return [{"arm": arm, "value": v * scale} for arm, values in samples.items() for v in values
            if v is not None]


def distribution(samples: dict[str, list[float]], *, title: str, axis: str, scale: float = 1.0,
                 subtitle: str | None = None) -> str | None:
    """One row of ticks per arm with a box plot under them: every observation visible."""
    rows = _rows(samples, scale)
    if not rows:
        return None
    data = alt.Data(values=rows)
    y = alt.Y("arm:N", title=None, sort=list(samples))
    x = alt.X("value:Q", title=axis, scale=alt.Scale(zero=False))
    color = alt.Color("arm:N", legend=None, sort=list(samples))
    box = alt.Chart(data).mark_boxplot(extent="min-max", size=14, opacity=0.35).encode(x=x, y=y, color=color)
    ticks = alt.Chart(data).mark_tick(thickness=1.5, size=22).encode(x=x, y=y, color=color)
    height = max(60, 38 * len(samples))
    props: dict[str, Any] = {"text": title}
    if subtitle:
        props["subtitle"] = subtitle
    return render(alt.layer(box, ticks).properties(title=alt.TitleParams(**props), width=WIDTH,
                                                   height=height))


def ttft_distribution(samples_s: dict[str, list[float]]) -> str | None:
    """Time to first token of each streamed request, per arm, in milliseconds."""
    return distribution(samples_s, title="Time to first token", axis="TTFT (ms)", scale=1000.0,
                        subtitle="one tick per streamed request; box: min, quartiles, max")


def itl_distribution(samples_s: dict[str, list[float]]) -> str | None:
    """Inter-token latency (gaps between streamed chunks), per arm, in milliseconds."""
    return distribution(samples_s, title="Inter-token latency", axis="gap between tokens (ms)",
                        scale=1000.0, subtitle="every gap between consecutive streamed chunks")


def memory_timeline(arm: str, t_s: list[float], metrics: dict[str, list[float | None]],
                    trip_t_s: float | None = None, threshold_bytes: float | None = None) -> str | None:
    """Memory readings of one arm's run over time, in GiB, with the trip (if any) marked."""
    rows = [
        {"t": t, "metric": name, "gib": v / 2**30}
        for name, values in metrics.items()
        for t, v in zip(t_s, values)
        if v is not None
    ]
    if not rows:
        return None
    base = alt.Chart(alt.Data(values=rows)).mark_line(interpolate="step-after", strokeWidth=1.5).encode(
        x=alt.X("t:Q", title="time since the watchdog started (s)"),
        y=alt.Y("gib:Q", title="memory (GiB)"),
        color=alt.Color("metric:N", title="reading"),
    )
    layers: list[alt.Chart] = [base]
    if threshold_bytes is not None:
        layers.append(alt.Chart(alt.Data(values=[{"gib": threshold_bytes / 2**30}]))
                      .mark_rule(color="#b00020", strokeDash=[4, 3]).encode(y="gib:Q"))
    if trip_t_s is not None:
        layers.append(alt.Chart(alt.Data(values=[{"t": trip_t_s}]))
                      .mark_rule(color="#b00020").encode(x="t:Q"))
    return render(alt.layer(*layers).properties(
        title=alt.TitleParams(text=f"Memory timeline: {arm}",
                              subtitle="watchdog samples; red: trip threshold / trip time"),
        width=WIDTH, height=HEIGHT))
