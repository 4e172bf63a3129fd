"""The sessions x replicates stage's part of a model page."""

from __future__ import annotations

from typing import Any

from suite.stages.base import PageInputs
from suite.stages.sessions.result import SessionsResult


def sessions_view(r: SessionsResult | None) -> dict[str, Any] | None:
    """Sessions x replicates: per configuration and prompt, distinct in K*R runs and the agreements."""
    if r is None:
        return None
    return {"sessions": r.sessions, "replicates": r.replicates, "launched": r.launched,
            "configurations": r.configurations, "table": r.table, "controls": r.controls,
            "outcomes": [o for o in r.outcomes if o.status != "ok"]}


def page(results: list[SessionsResult | None], inputs: PageInputs) -> dict[str, Any]:
    """The section's variables: each arm's view."""
    return {"sessions": [sessions_view(r) for r in results]}
