"""The extraction stage's part of a model page: per arm, identical sections, clean share,
precision and recall, the judge, and the per-section grid; every arm against the first one that
ran it, section by section (paired differences with their n), and the reloads beside it."""

from __future__ import annotations

from typing import Any

from suite.analysis.levels import ALPHA, percent
from suite.analysis.stats import PairedDifference, mean_se_of, paired_difference
from suite.stages.base import PageInputs
from suite.stages.extraction.result import ExtractionResult

# The level of the whole family of paired comparisons on one page (Bonferroni over its members).
FAMILY_ALPHA = ALPHA


def extraction_view(ex: ExtractionResult | None) -> dict[str, Any] | None:
    """Identical sections, clean share, precision/recall, judge, and the per-section grid.

    Identical sections are counted among those where every repeat gave valid JSON (records with
    `comparable_sections`); a section with any invalid repeat is an error in the grid.
    """
    if ex is None:
        return None
    grid: dict[str, str] = {}
    for sec in ex.per_section:
        if (ex.repeats and sec.invalid_json >= ex.repeats) or sec.comparable is False:
            grid[sec.section] = "error"
        elif sec.no_facts:
            grid[sec.section] = "no facts"
        else:
            grid[sec.section] = "same" if sec.identical else "changed"
    judge = ex.judge
    return {
        "identical": ex.identical_sections,
        "total": ex.sections,
        "comparable": ex.comparable_sections,  # None: an older record (identical counted over all)
        "no_facts": sum(1 for sec in ex.per_section if sec.no_facts),  # valid, nothing given: never identical
        "invalid_sections": ex.invalid_sections,
        "changed_sections": ex.changed_sections,
        "repeats": ex.repeats,
        "mode": ex.mode,
        "invalid_json": ex.invalid_json,
        "requests": ex.requests,
        "clean": mean_se_of(ex.clean_share),
        "complete": mean_se_of(ex.complete_share),
        "precision": mean_se_of(ex.precision),
        "recall": mean_se_of(ex.recall),
        "judge": mean_se_of(judge.score if judge else None),
        "judge_model": judge.model if judge else None,
        "judge_agreement": judge.agreement if judge else None,
        "judge_kappa": judge.kappa if judge else None,
        "judge_compared": judge.compared_facts if judge else None,
        "judge_graded": judge.graded_repeats if judge else None,
        "judge_reason": judge.graded_reason if judge else None,
        "per_repeat": ex.per_repeat,
        "grid": grid,
        **repeat_stability(ex),
    }


def repeat_stability(ex: ExtractionResult) -> dict[str, Any]:
    """What identical repeats do to the facts: the document parts whose verdict (clean and complete,
    or not; clean where the record predates it) flips from one repeat to another, with the exact
    95 % interval of that share, and how far the arm's score moves across its repeats (the range
    of the per-repeat share, in points)."""
    from suite.analysis.stats import clopper_pearson

    rates = [sec.complete_rate if sec.complete_rate is not None else sec.clean_rate for sec in ex.per_section
             if sec.comparable is not False]
    flips = sum(1 for r in rates if 0.0 < r < 1.0)
    shares: list[float] = [x for rp in ex.per_repeat
                           if (x := rp.complete_share if rp.complete_share is not None else rp.clean_share) is not None]
    spread = (max(shares) - min(shares)) if len(shares) > 1 else None
    return {"flips": flips, "flip_parts": len(rates),
            "flip_interval": clopper_pearson(flips, len(rates)) if rates and ex.repeats > 1 else None,
            "rerun_spread": spread}


def spread_against_gap(results: list[ExtractionResult | None], arms: list[str]) -> list[dict[str, Any]]:
    """Each arm's rerun spread (the range of its score over identical repeats) against its gap to
    the first arm that ran the stage (the difference of their mean scores): a spread as large as
    the gap means the comparison cannot be read from one run of each."""
    ran = [(arm, ex) for arm, ex in zip(arms, results, strict=True) if ex is not None and ex.per_section]
    if len(ran) < 2:
        return []

    def score(ex: ExtractionResult) -> float | None:
        share = ex.complete_share if ex.complete_share is not None and ex.complete_share.mean is not None \
            else ex.clean_share
        return share.mean

    base_arm, base = ran[0]
    out = []
    for arm, ex in ran[1:]:
        a, b = score(base), score(ex)
        spread = repeat_stability(ex)["rerun_spread"]
        base_spread = repeat_stability(base)["rerun_spread"]
        gap = abs(b - a) if a is not None and b is not None else None
        widest = max((x for x in (spread, base_spread) if x is not None), default=None)
        ratio = widest / gap if widest is not None and gap else None
        out.append({"arm": arm, "against": base_arm, "gap": gap, "spread": widest, "ratio": ratio,
                    "text": ("no gap to compare with" if gap is None else
                             f"gap {gap * 100:.1f} points; the wider rerun spread of the two "
                             f"{(widest or 0) * 100:.1f} points"
                             + (f" ({ratio:.1f}x the gap)" if ratio is not None else
                                " (the arms score alike: any spread exceeds the gap)" if widest else "")
                             if widest is not None else f"gap {gap * 100:.1f} points; one repeat: no rerun spread")})
    return out


def _part_scores(ex: ExtractionResult, field_name: str) -> dict[str, float]:
    """DocumentPart -> the arm's per-section score (already averaged over repeats)."""
    return {sec.section: v for sec in ex.per_section if (v := getattr(sec, field_name)) is not None}


def _points(v: float) -> str:
    """A difference of shares in percentage points, signed ('+3.0', '−4.1')."""
    p = v * 100.0
    if round(p, 1) == 0:
        return "0.0"
    return f"{'+' if p > 0 else '−'}{abs(p):.1f}"


def paired_text(d: PairedDifference) -> str:
    """One line for a paired difference, its n always shown; a direction only from `d.min_n` pairs on,
    "no detectable difference" (not "tie") where the interval covers 0; no interval where every
    difference is the same (no spread to estimate: the sign test's direction instead)."""
    sections = f"n = {d.n} paired document part{'' if d.n == 1 else 's'}"
    if d.mean is None:
        return f"no document part answered by both arms ({sections})"
    word = {"no detectable difference": "no detectable difference (the interval covers 0)",
            "higher": "higher", "lower": "lower",
            "too few": f"too few document parts to name a direction (at least {d.min_n})"}[d.verdict]
    if d.zero_spread:
        sign = f"; sign test p = {d.sign_p:.2g}" if d.sign_p is not None else ""
        word = word.replace(" (the interval covers 0)", "")
        return (f"{_points(d.mean)} points in every paired document part ({sections}): no spread to estimate, "
                f"no interval{sign}: {word}")
    if d.ci_low is None or d.ci_high is None:
        return f"{_points(d.mean)} points ({sections}: too few for an interval)"
    se = f", SE {d.se * 100:.1f}" if d.se is not None else ""
    level_text = percent(d.confidence)
    kind = "interval (t, widened for skew)" if d.method == "t+hall" else "t-interval"
    return (f"{_points(d.mean)} points{se}, {level_text} {kind} "
            f"[{_points(d.ci_low)}, {_points(d.ci_high)}] ({sections}): {word}")


def multiplicity_note(pairs: list[dict[str, Any]]) -> str | None:
    """The family the page's paired comparisons against one arm form, and its correction."""
    m = sum(len(p["rows"]) for p in pairs)
    if m < 2:
        return None
    return (f"The {m} comparisons against {pairs[0]['against']} are one family, corrected together "
            f"(Bonferroni): each interval is at {100 - 5 / m:.1f}%, so that all {m} hold together with 95%, "
            "and with no true difference anywhere none reads higher or lower by chance in more than 5% of pages")


def extraction_pairs(exs: list[ExtractionResult | None], arms: list[str]) -> list[dict[str, Any]]:
    """Every arm with an extraction result against the first such arm, as paired differences.

    Per section the arm's score averaged over its repeats; the difference (arm minus the first)
    over the sections both answered; mean, SE and Student's t 95% interval. Measures:
    clean and complete (clean where either record predates it), recall, and the judge's score
    where both arms were judged with per-section scores. Empty with fewer than two such arms.
    """
    ran = [(arm, ex) for arm, ex in zip(arms, exs, strict=True) if ex is not None and ex.per_section]
    if len(ran) < 2:
        return []
    base_arm, base = ran[0]
    planned: list[tuple[str, list[tuple[str, Any, Any]]]] = []
    for arm, ex in ran[1:]:
        measures: list[tuple[str, Any, Any]] = []
        a, b = _part_scores(base, "complete_rate"), _part_scores(ex, "complete_rate")
        if a and b:
            measures.append(("clean and complete", a, b))
        else:
            measures.append(("clean (missing facts allowed; an older record lacks 'complete')",
                             _part_scores(base, "clean_rate"), _part_scores(ex, "clean_rate")))
        measures.append(("recall", _part_scores(base, "recall"), _part_scores(ex, "recall")))
        if base.judge and ex.judge and base.judge.per_section and ex.judge.per_section:
            measures.append(("judge score", base.judge.per_section, ex.judge.per_section))
        planned.append((arm, measures))
    # the family: every comparison the page makes against the first arm (arms x measures), each
    # interval at 1 - 0.05 / m so that all m hold together with 95 % (Bonferroni)
    m = sum(len(measures) for _, measures in planned)
    out: list[dict[str, Any]] = []
    for arm, measures in planned:
        diffs = [(name, paired_difference(a, b, confidence=1.0 - FAMILY_ALPHA / m, family=m)) for name, a, b in measures]
        rows = [{"measure": name, "diff": diff, "text": paired_text(diff)} for name, diff in diffs]
        out.append({"arm": arm, "against": base_arm, "rows": rows})
    note = multiplicity_note(out)
    for p in out:
        p["multiplicity"] = note
    return out


def page(results: list[ExtractionResult | None], inputs: PageInputs) -> dict[str, Any]:
    """The section's variables: each arm's view, the paired comparisons, and every section any arm
    answered, in order."""
    extraction = [extraction_view(ex) for ex in results]
    part_ids = list(dict.fromkeys(sid for ex in extraction for sid in (ex or {}).get("grid", {})))
    return {"extraction": extraction, "extraction_pairs": extraction_pairs(results, inputs.arms),
            "extraction_spread": spread_against_gap(results, inputs.arms), "part_ids": part_ids}
