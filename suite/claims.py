"""Verdicts recomputed from the records, every time a record is read for a page, an export or
`results`; and the claims (suite.analysis.claims.Claim) every stage makes of a run.

`recompute_verdicts(summary)` gives each stage that declares `Stage.recompute` its verdicts made
again from the answers, launch outcomes and rows its result keeps, with today's statistics, so an
improved statistic reaches every record, old ones included. Where the text the run printed when it
ended differs from today's, `summary.recomputed` keeps both, with the suite version that wrote the
record, for the page's note; a stage whose result cannot be recomputed keeps its stored text,
marked as such. The stored texts are read for that note and nothing else.

`claims_of(summary)` is every claim of a run, in stage order: what the first screen, `--json` and
the export's claims table render.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from suite.analysis.claims import Claim, Recomputed
from suite.stages import STAGES

log = logging.getLogger(__name__)

# The result fields that hold a verdict's sentence (quoted in the note), and those that hold the
# verdict itself: a note is made where the verdict changed, not where only its wording did.
VERDICT_FIELDS = ("verdict", "within_verdict", "across_verdict", "elimination")
CLAIM_FIELDS = ("reproducible", "varies_with_batch", "stable_within", "consistent_across", "restoring")


def verdict_key(result: Any) -> tuple[Any, ...]:
    """What a result claims, without its wording: its verdict fields, each prompt's across-launch
    word, and the same of a nested pass (restarts' kept caches)."""
    own = tuple(getattr(result, f, None) for f in CLAIM_FIELDS)
    across = tuple((getattr(p, "across", None), getattr(p, "pattern", None))
                   for p in getattr(result, "prompts", None) or [] if not isinstance(p, str))
    nested = getattr(result, "with_kept_caches", None)
    return own + across + ((verdict_key(nested),) if nested is not None else ())


def written_by(summary: Any) -> str:
    """'suite 0.1.0' (with its commit where the record keeps one)."""
    sig = getattr(summary, "signature", None)
    version = getattr(sig, "suite_version", None)
    commit = getattr(sig, "suite_commit", None) or getattr(summary, "suite_commit", None)
    if version is None:
        return "an unknown suite version (the record has no signature)"
    return f"suite {version}" + (f" ({str(commit)[:12]})" if commit else "")


def _texts(result: Any, prefix: str = "") -> dict[str, str]:
    out = {prefix + f: str(getattr(result, f)) for f in VERDICT_FIELDS if getattr(result, f, None)}
    nested = getattr(result, "with_kept_caches", None)
    if nested is not None:
        out.update(_texts(nested, prefix + "kept caches: "))
    return out


def recompute_verdicts(summary: Any) -> Any:
    """Each stage's verdicts made again from its result's data (in place on `summary`, which is
    returned); what changed is listed in `summary.recomputed`."""
    notes: list[Recomputed] = []
    for name, stage in STAGES.items():
        result = getattr(summary, name, None)
        if stage.recompute is None or result is None:
            continue
        try:
            again = stage.recompute(result, summary)
        except Exception as exc:  # noqa: BLE001 - a record a statistic cannot read keeps its stored text
            log.warning("%s: the %s verdict could not be recomputed (%s: %s); its stored text is shown",
                        getattr(summary, "run_id", "?"), name, type(exc).__name__, exc)
            for f, text in _texts(result).items():
                notes.append(Recomputed(stage=name, field=f, then=text, now=text, written_by=written_by(summary),
                                        kept=True))
            continue
        before, after = _texts(result), _texts(again)
        if verdict_key(result) != verdict_key(again):
            for f, then in before.items():
                now = after.get(f, "")
                if now != then:
                    notes.append(Recomputed(stage=name, field=f, then=then, now=now, written_by=written_by(summary)))
        setattr(summary, name, again)
    summary.recomputed = notes
    return summary


LOG_TAIL_BYTES = 1 << 20  # how much of a failed runtime's log is read again for its error line


def refresh_failure(summary: Any, run_dir: Path) -> None:
    """A failed runtime's cause read again from its own log with today's rules (a traceback's
    source line such as `raise RuntimeError(` never stands for the cause; the engine's error line
    does), where the record keeps the log; the line the run printed then is kept for the note."""
    from suite.launchers.base import find_error_line

    failure = getattr(summary, "failure", None)
    if failure is None or not failure.log_file:
        return
    log_path = run_dir / failure.log_file
    try:
        if log_path.is_symlink() or not log_path.is_file():
            return
        with log_path.open("rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return
    from suite.secrets import scrub

    line = find_error_line(text)
    now = scrub(line) if line else None
    if now is None or now == failure.error_line:
        return
    then = failure.error_line or "(none)"
    if summary.reason and failure.error_line and failure.error_line in summary.reason:
        summary.reason = summary.reason.replace(failure.error_line, now)
    failure.error_line = now
    summary.recomputed.append(Recomputed(stage="failure", field="error_line", then=then, now=now,
                                         written_by=written_by(summary)))


def claims_of(summary: Any, only: str | None = None) -> list[Claim]:
    """Every claim of one run, stage by stage in the registry's order (`only`: that stage's alone)."""
    out: list[Claim] = []
    for name, stage in STAGES.items():
        result = getattr(summary, name, None)
        if stage.claims is None or result is None or (only is not None and name != only):
            continue
        try:
            made = stage.claims(result, summary)
        except Exception as exc:  # noqa: BLE001 - one stage's claims never hide the others'
            log.warning("%s: the %s claims could not be made: %s: %s", getattr(summary, "run_id", "?"), name,
                        type(exc).__name__, exc)
            continue
        for c in made:
            if unspoken(stage.verdicts, c):
                log.error("%s: a %s claim says %r, not a verdict of its kind %r (%s): a defect of the suite",
                          getattr(summary, "run_id", "?"), name, c.verdict, c.kind, ", ".join(stage.verdicts.get(c.kind, ())))
        out.extend(made)
    return out


def unspoken(verdicts: Mapping[str, tuple[str, ...]], c: Claim) -> bool:
    """Whether a claim's verdict is outside the closed vocabulary its stage declares for its kind
    (`Stage.verdicts`); a stage that declares none for that kind is not checked."""
    return bool(verdicts) and c.verdict not in verdicts.get(c.kind, ())


# The longest a stage's console line may be: a line a terminal shows whole, its full reasoning on
# the page and in `--json`.
STAGE_LINE_LIMIT = 160


def stage_line(summary: Any, stage: str, result: Any) -> str:
    """A stage's verdict in one short console line, from its claims: the run-level claim's phrase
    where the stage makes one (an elimination, a batch verdict), else each prompt's phrase named by
    its prompt; cut at `STAGE_LINE_LIMIT` characters with an ellipsis. Empty where the stage makes
    no claim."""
    spec = STAGES.get(stage)
    if spec is None or spec.claims is None or result is None:
        return ""
    try:
        claims = spec.claims(result, summary)
    except Exception as exc:  # noqa: BLE001 - a console line never stops a bench
        log.debug("%s: no console line: %s: %s", stage, type(exc).__name__, exc)
        return ""
    def said(c: Claim) -> str:
        label, phrase = c.configuration or c.prompt, c.phrase or c.verdict
        return phrase if not label or phrase.startswith(label) else f"{label}: {phrase}"

    whole = [c for c in claims if c.kind == "elimination" or (c.prompt is None and c.configuration is None)]
    text = "; ".join(dict.fromkeys(said(c) for c in (whole or claims) if c.phrase or c.verdict))
    text = " ".join(text.split())
    return text if len(text) <= STAGE_LINE_LIMIT else text[:STAGE_LINE_LIMIT - 1].rstrip() + "…"
