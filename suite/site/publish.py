"""Publishing: the static website, a pure function of the results folder.

`build_site(results, out)` empties the output folder, loads and validates every run record
(`suite.records.load_all`), turns each into the figures the pages show, and renders the jinja2
templates of `site/templates/` (autoescape on) to plain HTML, with the CSS of `site/static/`
and the charts inlined as SVG (`suite.site.charts`). The pages need no network and no JavaScript and
read well from `file://`.

Pages: `index.html` (every model, its arms and their headline figures), `models/<model>.html`
(the arms side by side: gate, determinism mode, controls, restarts, latency, extraction,
watchdog, configuration signatures), `models/<model>/gate-<prompt>.html` (the distinct answers
to one gate prompt, where each departs from the modal answer marked) and `runs/<run>.html`
(one run's record, including incomplete and failed runs).

Model output is untrusted: it only reaches a page as text through an escaping template.
The figures come from `suite.site.figures`; `list_runs(results)` is the table behind `suite results`.
"""

from __future__ import annotations

import fcntl
import glob
import logging
import math
import os
import re
import shutil
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from jinja2 import (
    ChoiceLoader,
    Environment,
    FileSystemBytecodeCache,
    FileSystemLoader,
    PrefixLoader,
    StrictUndefined,
    select_autoescape,
)
from markupsafe import Markup
from pydantic import BaseModel

from suite.analysis.claims import Claim, Recomputed
from suite.analysis.levels import ALPHA, CONFIDENCE, percent
from suite.errors import SuiteError
from suite.export import page_downloads
from suite.paths import SITE_DIR, cache_dir, open_lock
from suite.provenance import SuiteBuild
from suite.records import read_requests
from suite.run_figures import LatencyFigures, run_figures
from suite.sanitize import printable, printable_markup
from suite.signature import kernel_differences
from suite.site import charts
from suite.site.figures import (
    ModelRuns,
    PromptView,
    Run,
    analyse_requests,
    arm_comparisons,
    gate_prompts,
    gate_settings_text,
    itl_gaps,
    load_runs,
    machine_rows,
    memory_line,
    prompt_view,
    signature_rows,
    slug,
    watchdog_view,
    with_thousands,
)
from suite.stages import LATENCY_STAGE, SLOTS, STAGES, VERDICT_STAGE, Stage, page_sections
from suite.stages.base import PageInputs, SectionTemplate
from suite.stages.latency import LatencyLine
from suite.stages.latency.view import latency_sweep
from suite.stages.lines import AnswerLine

log = logging.getLogger(__name__)

TEMPLATES_DIR = SITE_DIR / "templates"
STATIC_DIR = SITE_DIR / "static"
MARKER = ".suite-site"  # written into every output folder: only such a folder is emptied


class BuildReport(BaseModel):
    """What `build_site` did."""

    out_dir: str
    index: str
    runs: int
    complete: int
    incomplete: int
    models: int
    pages: int
    charts: int
    seconds: float
    load_s: float = 0.0  # reading and validating the records
    chart_s: float = 0.0  # drawing the charts (on their own threads, while pages are written)
    pages_s: float = 0.0  # everything after loading: figures, templates, charts, writing
    stage_problems: list[str] = []  # stage results that do not match the stage models (left out of their run)
    section_problems: list[str] = []  # stage sections that could not be drawn (each says why on its page)
    records_skipped: list[str] = []  # run records that could not be read (each named in the log), left out

    def __str__(self) -> str:
        text = (f"{self.pages} pages, {self.charts} charts from {self.runs} runs "
                f"({self.complete} complete, {self.incomplete} not) of {self.models} models "
                f"in {self.seconds:.2f} s")
        if self.stage_problems:
            text += f"; {len(self.stage_problems)} stage results do not match this suite's models (see the log)"
        if self.section_problems:
            text += f"; {len(self.section_problems)} stage sections could not be drawn (see the log and their pages)"
        if self.records_skipped:
            text += f"; {len(self.records_skipped)} run records could not be read and are left out (see the log)"
        return text

    def line(self) -> str:
        return (f"site: {self} (records {self.load_s:.2f} s, pages {self.pages_s:.2f} s, of which "
                f"charts {self.chart_s:.2f} s drawn alongside); open {self.index}")


# --------------------------------------------------------------------------------------------
# Rendering.
# --------------------------------------------------------------------------------------------

def fmt_num(v: Any, digits: int = 1) -> str:
    """A number for a page: thousands separators, `digits` decimals; '—' for none."""
    if v is None or isinstance(v, str):
        return "—" if v is None else v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        return f"{v:,.{digits}f}"
    return str(v)


def fmt_pm(mean: float | None, se: float | None, digits: int = 2) -> str:
    if mean is None:
        return "—"
    return f"{mean:.{digits}f}" + (f" ± {se:.{digits}f}" if se is not None else "")


def fmt_pct_pm(mean: float | None, se: float | None, n: int | None = None) -> str:
    """A share in percent with its standard error over `n` units (sections). Where every unit gave
    the same share the standard error is zero and says nothing: at 0 % or 100 % the page gives
    instead how far the true share could be with none (or all) of n seen (95 %, one-sided)."""
    if mean is None:
        return "—"
    base = f"{mean * 100:.1f} %"
    if se is None:
        return base
    if se == 0 and n:
        if mean == 0:
            return f"{base} (0 of {n}: up to {(1 - ALPHA ** (1 / n)) * 100:.0f} % is not ruled out, {percent(CONFIDENCE, space=True)})"
        if mean == 1:
            return f"{base} ({n} of {n}: down to {ALPHA ** (1 / n) * 100:.0f} % is not ruled out, {percent(CONFIDENCE, space=True)})"
        return f"{base} (all {n} alike: no spread to estimate)"
    return f"{base} ± {se * 100:.1f}"


def humanize(key: str) -> str:
    return key.replace("_", " ").replace(".", " · ")


def make_env() -> Environment:
    """The templates' environment: autoescape on for every template, compiled once per build.

    Compiled templates are kept in the cache folder (jinja's bytecode cache, keyed by the
    templates' contents), which spares later builds the compilation.
    """
    bytecode_cache = None
    try:
        # compiled code depends on the environment's settings (its `finalize`), which the cache's
        # key does not cover: a folder per version of those settings
        folder = cache_dir() / "site-templates-printable"
        folder.mkdir(parents=True, exist_ok=True)
        bytecode_cache = FileSystemBytecodeCache(str(folder))
    except OSError as exc:  # a read-only cache folder: compile every time
        log.debug("no template cache: %s", exc)
    env = Environment(
        # the site's own templates, then each stage's section in its own folder ("restarts/section.html")
        loader=ChoiceLoader([FileSystemLoader(str(TEMPLATES_DIR)), PrefixLoader({
            stage.name: FileSystemLoader(str(stage.folder)) for stage in STAGES.values()
            if isinstance(stage.section, SectionTemplate)})]),
        auto_reload=False,
        bytecode_cache=bytecode_cache,
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=printable_markup,  # no control character of a record reaches a page
    )
    env.filters.update(num=fmt_num, thousands=with_thousands, pm=fmt_pm, pct_pm=fmt_pct_pm, humanize=humanize,
                       slug=slug)
    return env


def _check_out(out: Path, results: Path) -> None:
    """`out` may take a site: apart from the results, a folder (or nothing), empty or one this suite built."""
    out_r, res_r = out.resolve(), results.resolve()
    if out_r == res_r or out_r in res_r.parents or res_r in out_r.parents:
        raise SuiteError(f"{out}: the site's output folder must be apart from the results folder {results}")
    if out.exists():
        if not out.is_dir():
            raise SuiteError(f"{out}: exists and is not a folder")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise SuiteError(f"{out}: not empty and not a site this suite built; choose another --out")


def _new_build(out: Path, results: Path) -> Path:
    """A fresh temporary sibling of `out` for one build to write into (`out` itself is not touched)."""
    _check_out(out, results)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.build-{os.getpid()}-{time.monotonic_ns()}")
        tmp.mkdir()  # as the umask says (a web server may read it), unlike mkdtemp's 0700
        (tmp / MARKER).write_text("built by `suite site`; emptied on every build\n")
    except OSError as exc:
        raise SuiteError(f"{out}: cannot write the site beside it: {exc.strerror or exc}") from None
    return tmp


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _swap_in(tmp: Path, out: Path, results: Path) -> threading.Thread | None:
    """Put the finished build `tmp` in place of `out`, under a lock that other builds of `out` take too.

    Two builds at once each write their own temporary sibling; the lock orders the swaps, so `out`
    is always one whole site (the last to finish). The old site is moved aside at once and deleted
    on a thread; leftovers of a killed build (its process gone) are deleted too."""
    lock_path = out.with_name(f".{out.name}.lock")
    try:
        fh = open_lock(lock_path)  # never through a symbolic link
    except OSError as exc:
        raise SuiteError(f"{lock_path}: cannot lock the site folder: {exc.strerror or exc}") from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        _check_out(out, results)  # again: something else may have taken the folder meanwhile
        stale = []
        for p in out.parent.glob(f".{glob.escape(out.name)}.*"):
            kind, _, rest = p.name[len(out.name) + 2:].partition("-")
            if kind == "old" or (kind == "build" and p != tmp and rest.split("-")[0].isdigit()
                                 and not _pid_alive(int(rest.split("-")[0]))):
                stale.append(p)
        try:
            if out.exists():
                old = out.with_name(f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}")
                out.rename(old)
                stale.append(old)
            tmp.rename(out)
        except OSError as exc:
            raise SuiteError(f"{out}: cannot put the new site in place: {exc.strerror or exc}") from None
    if not stale:
        return None

    def remove() -> None:
        for p in stale:
            if p.is_symlink():  # `out` was a link to a site folder: the link goes, the build stands in its place
                p.unlink(missing_ok=True)
            else:
                shutil.rmtree(p, ignore_errors=True)

    remover = threading.Thread(target=remove, name="site-old-output", daemon=False)
    remover.start()
    return remover


class _Site:
    """One build: the environment, the output folder, page and chart counts."""

    def __init__(self, out: Path):
        self.out = out
        self.env = make_env()
        self.pages = 0
        self.charts = 0
        self.section_problems: list[str] = []
        self.chart_s = 0.0
        self._requests: dict[str, list[AnswerLine | LatencyLine]] = {}
        self._lock = threading.Lock()
        self._written: set[str] = set()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="site-chart")

    def write(self, rel: str, template: str, **ctx: Any) -> None:
        if rel.lower() in self._written:  # two names with one page (the lower case: a case-blind file system)
            raise SuiteError(f"site: two pages would be written to {rel}; rename one of the models, arms or "
                             "prompts that give it")
        self._written.add(rel.lower())
        depth = rel.count("/")
        html = with_permalinks(self.env.get_template(template).render(root="../" * depth, **ctx))
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
        self.pages += 1

    def requests(self, run: Run) -> list[AnswerLine | LatencyLine]:
        """The gate and latency request records of a run (read once per build)."""
        key = str(run.run_dir)
        if key not in self._requests:
            self._requests[key] = read_requests(run.run_dir, (VERDICT_STAGE, LATENCY_STAGE))
        return self._requests[key]

    def chart(self, draw: Any, *args: Any) -> Future[str | None]:
        """Draw one chart (`draw(*args)`) on the chart threads; the page waits for it when written.

        The renderer runs outside the interpreter's lock, so charts are drawn while pages are
        written.
        """
        def timed() -> str | None:
            t = time.perf_counter()
            svg = draw(*args)
            with self._lock:
                self.chart_s += time.perf_counter() - t
                if svg is not None:
                    self.charts += 1
            return svg

        return self._pool.submit(timed)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _gate_page(model: ModelRuns, prompt_id: str) -> str:
    return f"models/{slug(model.name)}/gate-{slug(prompt_id)}.html"


# The stages a model page shows from the newest run holding each (record field -> name on the page).
PAGE_STAGES = {stage.name: stage.page_title for stage in STAGES.values() if stage.page_title is not None}
# A model page's own parts (not a stage's), as (anchor, name in the table of contents): those after
# each slot's stage sections, and those at its foot.
OWN_PARTS: dict[str, list[tuple[str, str]]] = {
    "answers": [("arms-compared", "arms compared"), ("machines", "machines"), ("determinism", "determinism mode")], "causes": [], "measures": []}
FOOT_PARTS: list[tuple[str, str]] = [("watchdog", "watchdog"), ("signature", "configuration"), ("runs", "all runs")]


def table_of_contents(templated: list[Stage], generic: list[Stage]) -> list[tuple[str, str]]:
    """A model page's table of contents, (anchor, name) in the page's order: each slot's stage
    sections (`suite.stages.page_sections`, each anchored at its stage's name) and the page's own
    parts after them, the sections of stages without a template of their own, then the foot."""
    toc: list[tuple[str, str]] = []
    for slot in SLOTS:
        toc += [(s.name, s.page_title or s.name) for s in templated
                if isinstance(s.section, SectionTemplate) and s.section.slot == slot]
        toc += OWN_PARTS[slot]
    toc += [(f"stage-{s.name}", s.page_title or s.name) for s in generic]
    return toc + FOOT_PARTS


def _model_charts(site: _Site, model: ModelRuns) -> dict[str, Future[str | None]]:
    """Start drawing a model page's charts: TTFT, inter-token latency, memory timelines."""
    runs = model.current_for(LATENCY_STAGE)
    requests = [site.requests(r) for r in runs]
    latency_reqs = [[q for q in reqs if isinstance(q, LatencyLine) and q.kind == LATENCY_STAGE and not q.warmup
                     and not q.error and not q.incomplete and q.concurrency == 1]
                    for reqs in requests]
    ttft = {r.s.arm: [q.ttft_s for q in reqs if q.ttft_s is not None] for r, reqs in zip(runs, latency_reqs, strict=True)}
    itl = {r.s.arm: [g for q in reqs for g in itl_gaps(q)] for r, reqs in zip(runs, latency_reqs, strict=True)}
    ttft_svg = site.chart(charts.ttft_distribution, {k: v for k, v in ttft.items() if v})
    itl_svg = site.chart(charts.itl_distribution, {k: v for k, v in itl.items() if v})

    series = []
    for r in model.current:
        line = memory_line(r.s)
        series.append(charts.MemorySeries(r.s.arm, line.t_s, line.metrics, trip_t_s=line.trip_t_s,
                                          threshold_bytes=line.threshold_bytes, launch=line.launch))
    memory_svg = site.chart(charts.memory_timelines, series)
    sweep_svg = site.chart(charts.concurrency_sweep, {r.s.arm: latency_sweep(r.s.latency) for r in runs})

    cost_svg = site.chart(charts.cost_scatter, model.gate_figures)
    return {"ttft": ttft_svg, "itl": itl_svg, "memory": memory_svg, "sweep": sweep_svg, "cost": cost_svg}


def _with_interrupted(site: _Site, model: ModelRuns, lines: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each section's lines, with one per arm that has no result of the stage but a run that sent
    requests of it before it stopped (cut by a time limit, say): what was measured is named, and
    where it is kept, never silently dropped."""
    sent: dict[Path, Counter[str]] = {}  # per unfinished run, requests sent per stage (read once)
    for arm in model.arms.values():
        for stage in PAGE_STAGES:
            if getattr(arm.for_stage(stage).s, stage, None) is not None:
                continue
            for r in arm.runs:
                if r.s.status == "complete" or getattr(r.s, stage, None) is not None:
                    continue
                if r.run_dir not in sent:
                    sent[r.run_dir] = Counter((getattr(q, "stage", None) or q.kind)
                                              for q in read_requests(r.run_dir, PAGE_STAGES))
                if sent[r.run_dir][stage]:
                    lines.setdefault(stage, []).append(
                        f"{arm.name}: run {r.s.run_id} ({r.s.status}) sent {sent[r.run_dir][stage]} requests of "
                        f"this stage and stopped before its result; they are kept in that run's requests.jsonl")
    return lines


_SECTION_HEAD = re.compile(r'(<(?:section|div)\b[^>]*?\bid="([A-Za-z0-9_-]+)"[^>]*>\s*<h([23])>)(.*?)(</h\3>)', re.S)


def with_permalinks(html: str) -> str:
    """Every section and arm card of a page with a visible link to itself (`¶` under its heading),
    so a reader can point at one part of a page. Only the page's own ids are linked: an id is the
    template's, its heading's text is left as rendered (escaped already)."""
    return _SECTION_HEAD.sub(lambda m: f'{m.group(1)}{m.group(4)}{m.group(5)}<a class="permalink" href="#{m.group(2)}" '
                             f'title="link to this part of the page">¶ link here</a>', html)


def _model_page(site: _Site, model: ModelRuns, generated: str, drawn: dict[str, Future[str | None]]) -> None:
    """One column per arm: its current run (`ArmRuns.current`) in the cards, and each stage from the
    newest run that ran it (`ArmRuns.for_stage`), named where that is another run."""
    runs = model.current
    arms = [r.s.arm for r in runs]
    by = {stage: model.current_for(stage) for stage in PAGE_STAGES}
    gate_runs = by[VERDICT_STAGE]
    requests = [site.requests(r) for r in gate_runs]
    gate: list[dict[str, PromptView]] = []
    for r, reqs in zip(gate_runs, requests, strict=True):
        by_prompt = {p.prompt_id: p for p in gate_prompts(r.s.gate)}
        # a run whose gate never finished: rebuild its prompts from the request records
        recorded: dict[str, list[AnswerLine]] = {}
        for q in reqs:
            if isinstance(q, AnswerLine) and q.kind == VERDICT_STAGE:
                recorded.setdefault(q.prompt_id, []).append(q)
        for pid, qs in recorded.items():
            if pid not in by_prompt or not by_prompt[pid].answers:
                rebuilt = prompt_view(analyse_requests(qs), pid, stopped_reason="rebuilt from the request records")
                by_prompt[pid] = rebuilt
        gate.append(by_prompt)
    prompt_ids: list[str] = []
    for g in gate:
        for pid in g:
            if pid not in prompt_ids:
                prompt_ids.append(pid)

    for pid in prompt_ids:
        per_arm = [g.get(pid) for g in gate]
        if any(p is not None and p.answers for p in per_arm):
            rel = _gate_page(model, pid)
            site.write(rel, "answers.html", model=model, prompt_id=pid, arms=arms, runs=gate_runs,
                       gate=per_arm, generated=generated)
            for p in per_arm:
                if p is not None:
                    p.page = rel

    # the sections of stages without a template of their own (a stage added as its own package)
    generic = [stage for stage in STAGES.values() if stage.section is not None
               and not isinstance(stage.section, SectionTemplate) and stage.name in by]
    stage_sections = [
        {"name": stage.name, "title": stage.page_title, "summary": stage.summary,
         "arms": [(r.s.arm, stage.page_section(getattr(r.s, stage.name, None))) for r in by[stage.name]]}
        for stage in generic]
    # the sections stages draw with templates of their own, in the page's order
    templated = [s for s in page_sections() if s.name in by]
    machines = machine_rows(model)
    context: dict[str, Any] = dict(
        model=model, runs=runs, arms=arms, prompt_ids=prompt_ids,
        gate=gate, generated=generated, ttft_svg=drawn["ttft"].result(), itl_svg=drawn["itl"].result(),
        memory_svg=drawn["memory"].result(),
        watchdog=[watchdog_view(r.s.watchdog) for r in runs],
        signature_rows=signature_rows(runs),
        kernel_phrases=kernel_differences([r.s.signature for r in runs]),
        sweep_svg=drawn["sweep"].result(), cost_svg=drawn["cost"].result(),
        arm_comparisons=arm_comparisons(gate_runs, arms), machines=machines,
        downloads={table: {k: f"{slug(model.name)}/data/{v}" for k, v in files.items()} for table, files in
                   page_downloads(model.all_runs, site.out / Path(model.page).parent / slug(model.name) / "data").items()},
        # the machines section only where a record names its machine (no link to a section not shown)
        toc=[(a, n) for a, n in table_of_contents(templated, generic) if a != "machines" or machines],
        stage_sections=stage_sections, stage_runs=by, borrowed=_with_interrupted(site, model, model.borrowed(PAGE_STAGES)),
    )
    # each stage section in its slot of the page
    inputs = PageInputs(arms=arms, prompt_ids=prompt_ids)
    stage_slots: dict[str, list[Markup]] = {slot: [] for slot in SLOTS}
    in_sections = {**context, "root": "../" * model.page.count("/"), "run_page": False}
    for stage in templated:
        assert isinstance(stage.section, SectionTemplate)
        results = [getattr(r.s, stage.name, None) for r in by[stage.name]]
        stage_slots[stage.section.slot].append(
            _stage_section(site, stage.name, stage.section, results, inputs, in_sections))
    site.write(model.page, "model.html", **context, stage_slots=stage_slots)


def _run_sections(site: _Site, run: Run) -> list[Markup]:
    """The stages' own sections on a run's page, for that run alone, in the model page's order
    (`suite.stages.page_sections`): each where the run has the stage's result, or where a stage
    every bench runs has none and the run did not fail (its section says it did not run)."""
    gate = gate_prompts(run.s.gate)
    inputs = PageInputs(arms=[run.s.arm], prompt_ids=[p.prompt_id for p in gate])
    out = []
    for stage in page_sections():
        section = stage.section
        result = getattr(run.s, stage.name, None)
        if not isinstance(section, SectionTemplate) or not section.on_run_page:
            continue
        if result is None and (run.failure or not stage.in_bench):
            continue
        context = {"root": "../" * run.page.count("/"), "arms": [run.s.arm], "runs": [run], "borrowed": {},
                   "stage_runs": {stage.name: [run]}, "prompt_ids": inputs.prompt_ids, "run_page": True,
                   "gate": [{p.prompt_id: p for p in gate}]}
        out.append(_stage_section(site, stage.name, section, [result], inputs, context))
    return out


def _stage_section(site: _Site, name: str, section: SectionTemplate, results: list[Any], inputs: PageInputs,
                   context: dict[str, Any]) -> Markup:
    """One stage's own section of a page (a model's, or one run's), drawn by its template with its
    view's variables beside the page's. A section that cannot be drawn (its view fails, gives a name the page
    uses, or its template fails) is one line in its place and in the log; the page is written."""
    try:
        variables = section.variables(results, inputs)
        clash = sorted(set(variables) & set(context))
        if clash:
            raise SuiteError(f"its view gives {clash[0]!r}, a name the page itself uses")
        return Markup(site.env.get_template(f"{name}/{section.template}").render(**context, **variables))
    except Exception as exc:  # noqa: BLE001 - one stage's section must not take the page down
        line = f"stage {name!r}: its page section could not be drawn: {type(exc).__name__}: {exc}"
        log.warning("%s", line)
        site.section_problems.append(line)
        return Markup('<section id="{0}" class="stage-section"><p class="bad">{1}</p></section>\n\n').format(
            name, line)


LOG_COPY_BYTES = 1 << 20  # the end of a failed runtime's log copied into the site, at most


def _copy_failure_log(out_dir: Path, run: Run) -> str:
    """A failed run's runtime log, copied into the site as text (its last MiB, URL credentials and
    the suite's secret values scrubbed) so its page can link to it; "" when there is none."""
    from suite.secrets import scrub

    failure = getattr(run.s, "failure", None)
    if run.s.status != "failed" or failure is None or not failure.log_file:
        return ""
    source = (run.run_dir / failure.log_file).resolve()
    if run.run_dir.resolve() not in source.parents or not source.is_file():
        return ""  # a record naming a file outside its run folder is not followed
    try:
        with source.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - LOG_COPY_BYTES))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    head = f"(the last {LOG_COPY_BYTES // 1024} KiB of {size} bytes)\n" if size > LOG_COPY_BYTES else ""
    rel = f"runs/{slug(run.s.run_id)}-{slug(run.s.arm)}-{slug(Path(failure.log_file).name)}.txt"
    path = out_dir / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(printable(head + scrub(text)), encoding="utf-8")
    return rel


def build_site(results_dir: Path, out_dir: Path) -> BuildReport:
    """Load every record of `results_dir`, write the website into a temporary sibling of `out_dir`,
    and swap it in under a lock (`_swap_in`): a reader, or another build, never sees half a site."""
    t0 = time.perf_counter()
    results_dir, out_dir = Path(results_dir), Path(out_dir)
    engine = threading.Thread(target=charts.warm_up, name="site-chart-engine", daemon=True)
    engine.start()  # the chart renderer starts while the records are read
    problems: list[str] = []
    skipped: list[str] = []
    models = load_runs(results_dir, problems, skipped)  # validates every record before anything is deleted
    for line in problems:
        log.warning("stage result left out: it does not match this suite's stage models: %s", line)
    t_loaded = time.perf_counter()
    build_dir = _new_build(out_dir, results_dir)
    try:
        report = _write_site(build_dir, out_dir, models, problems, engine, t0, t_loaded)
        report.records_skipped = skipped
        remover = _swap_in(build_dir, out_dir, results_dir)
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    if remover is not None:
        remover.join()
    log.debug(report.line())
    return report


def _write_site(build_dir: Path, out_dir: Path, models: dict[str, ModelRuns], problems: list[str],
                engine: threading.Thread, t0: float, t_loaded: float) -> BuildReport:
    """Write every page into `build_dir` (the site that will stand at `out_dir`)."""
    site = _Site(build_dir)
    shutil.copytree(STATIC_DIR, build_dir / "static")
    # the newest record's date, not the clock: the same results folder gives the same site
    stamps = [r.s.finished_at or r.s.started_at for m in models.values() for a in m.arms.values() for r in a.runs]
    generated = max(stamps).replace("T", " ").replace("Z", " UTC") if stamps else "no runs yet"
    all_runs = [r for m in models.values() for a in m.arms.values() for r in a.runs]

    try:
        engine.join()
        drawn = {name: _model_charts(site, model) for name, model in models.items()}
        shown = [a.gate_run for m in models.values() for a in m.arms.values()]
        site.write("index.html", "index.html", models=models, generated=generated,
                   n_runs=len(all_runs), gate_settings=gate_settings_text([r.s.gate for r in shown],
                                                                          [f"{r.s.model} {r.s.arm}" for r in shown]))
        for run in all_runs:
            run.log_page = _copy_failure_log(build_dir, run)
        for run in all_runs:  # written while the charts are drawn
            site.write(run.page, "run.html", model=models[run.s.model], run=run, generated=generated,
                       stage_parts=_run_sections(site, run),
                       watchdog=watchdog_view(run.s.watchdog))
        for name, model in models.items():
            _model_page(site, model, generated, drawn[name])
    finally:
        site.close()
    complete = sum(1 for r in all_runs if r.s.status == "complete")
    total = time.perf_counter() - t0
    report = BuildReport(
        out_dir=str(out_dir), index=str((out_dir / "index.html").resolve()), runs=len(all_runs),
        complete=complete, incomplete=len(all_runs) - complete, models=len(models),
        pages=site.pages, charts=site.charts, seconds=round(total, 3), stage_problems=problems,
        section_problems=site.section_problems,
        load_s=round(t_loaded - t0, 3), chart_s=round(site.chart_s, 3),
        pages_s=round(total - (t_loaded - t0), 3),
    )
    return report


def has_tags(summary: Any, wanted: dict[str, str] | None) -> bool:
    """Whether a run carries every one of these `--tag KEY=VALUE` labels (none asked: every run)."""
    tags = summary.tags
    return all(tags.get(k) == v for k, v in (wanted or {}).items())


# `suite results --format json`'s envelope: its version changes when a field changes meaning.
RESULTS_SCHEMA_VERSION = 1
# The columns of `suite results --format md|csv`: RunRow's fields, in this order.
LISTED = ("short_id", "started_at", "model", "arm", "status", "determinism", "distinct_answers", "requests", "ttft_p50_ms",
          "tokens_per_s", "j_per_token", "reason", "tags", "run_id")


def list_runs(results_dir: Path, tags: dict[str, str] | None = None) -> Any:
    """`suite results` in a terminal: one line per run, newest first, in the terminal's width (80
    columns hold it): its short id whole (it is what `suite compare` takes), its start, arm, status,
    distinct answers of the requests, TTFT p50 in ms, tokens/s and J/token; the model as each group's
    title; a failed run's reason on a line of its own under the table. `--format md|csv|json` for
    every field."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from suite.progress import cells

    rows = run_rows(results_dir, tags)
    wanted = " ".join(f"{k}={v}" for k, v in (tags or {}).items())
    parts: list[Any] = [Text(f"runs in {results_dir}" + (f" tagged {wanted}" if wanted else "")
                             + ("" if rows else ": none"))]
    for model in dict.fromkeys(r.model for r in rows):
        table = Table(title=Text(model), title_justify="left", box=None, pad_edge=False, padding=(0, 1),
                      caption=Text("answers: distinct of requests (the gate's most varied prompt); TTFT p50 in ms"),
                      caption_justify="left")
        table.add_column("id", no_wrap=True, min_width=8)
        table.add_column("started", no_wrap=True, min_width=11)
        table.add_column("arm", overflow="ellipsis", min_width=8)  # the one column that gives way
        table.add_column("status", overflow="ellipsis", min_width=8)  # gives way after the arm
        table.add_column("answers", no_wrap=True, justify="right", min_width=7)
        table.add_column("TTFT", no_wrap=True, justify="right", min_width=6)
        table.add_column("tok/s", no_wrap=True, justify="right", min_width=6)
        table.add_column("J/tok", no_wrap=True, justify="right", min_width=6)
        notes: list[Text] = []
        for r in (r for r in rows if r.model == model):
            answers = f"{r.distinct_answers}/{r.requests}" if r.distinct_answers is not None else "-"
            table.add_row(*cells(r.short_id, r.started_at[5:16].replace("T", " "), r.arm, r.status, answers,
                                 _sig(r.ttft_p50_ms), _sig(r.tokens_per_s), _sig(r.j_per_token)))
            if r.reason and r.status != "complete":
                notes.append(Text(f"  {r.short_id} {r.status}: {r.reason}"))
            if r.tags:
                notes.append(Text(f"  {r.short_id} tags: " + " ".join(f"{k}={v}" for k, v in r.tags.items())))
        parts.extend([table, *notes])
    return Group(*parts)


def _sig(v: float | None) -> str:
    """A figure in a narrow column: three significant digits (`0.412`, `15.5`, `426`), '—' for none."""
    if v is None:
        return "—"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def runs_document(results_dir: Path, tags: dict[str, str] | None = None) -> dict[str, Any]:
    """`suite results --format json`: the runs with the envelope's schema version."""
    return {"schema_version": RESULTS_SCHEMA_VERSION,
            "runs": [row.model_dump(mode="json") for row in run_rows(results_dir, tags)]}


def runs_flat(results_dir: Path, tags: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The runs as flat rows of `LISTED` (tags as KEY=VALUE words), for Markdown and CSV."""
    out = []
    for row in run_rows(results_dir, tags):
        data = row.model_dump(mode="json")
        data["tags"] = " ".join(f"{k}={v}" for k, v in row.tags.items())
        out.append({k: data.get(k) for k in LISTED})
    return out


def runs_markdown(results_dir: Path, tags: dict[str, str] | None = None) -> str:
    """The runs as a Markdown table to paste into an issue (every cell escaped for Markdown)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        text = printable("" if v is None else str(v)).replace("\\", "\\\\").replace("|", "\\|")
        return " ".join(text.split()) or "-"

    lines = ["| " + " | ".join(LISTED) + " |", "|" + "---|" * len(LISTED)]
    lines += ["| " + " | ".join(cell(r[k]) for k in LISTED) + " |" for r in runs_flat(results_dir, tags)]
    return "\n".join(lines) + "\n"


def runs_csv(results_dir: Path, tags: dict[str, str] | None = None) -> str:
    """The runs as CSV (every text cell made safe for a spreadsheet, as the export's)."""
    import csv
    import io

    from suite.sanitize import csv_cell

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(LISTED)
    for r in runs_flat(results_dir, tags):
        writer.writerow(["" if r[k] is None else csv_cell(r[k]) if isinstance(r[k], str) else r[k] for k in LISTED])
    return buf.getvalue()


class RunRow(BaseModel):
    """One run as `suite results --json` gives it: the figures of the table, typed, with the
    latency percentiles in ms, tokens/s and J/token (`RunFigures`), its tags and the suite's code."""

    run_id: str
    short_id: str  # the 8-character id printed for it (its own: reruns never share one); `suite compare` takes it
    run_dir: str
    model: str
    arm: str
    runtime: str
    launcher: str
    profile: str
    overrides: dict[str, Any] = {}  # the profile's settings this run changed (the run record's invocation)
    status: str
    reason: str | None = None
    started_at: str
    finished_at: str | None = None
    determinism: str
    distinct_answers: int | None = None  # the most distinct answers any gate prompt gave
    requests: int | None = None  # of that many requests
    ttft_p50_ms: float | None = None
    tokens_per_s: float | None = None
    clean_share: float | None = None
    clean_share_se: float | None = None
    signature: str | None = None
    tags: dict[str, str] = {}  # `--tag KEY=VALUE` labels of the run
    suite: SuiteBuild | None = None  # the suite's version, commit and tree state that wrote it (None: older record)
    # RunFigures': latency percentiles in ms and tokens/s, J/token, and the run's claims
    latency: LatencyFigures | None = None
    j_per_token: float | None = None
    claims: list[Claim] = []
    recomputed: list[Recomputed] = []


def run_rows(results_dir: Path, tags: dict[str, str] | None = None) -> list[RunRow]:
    """Every run under the results folder (with `tags`: those carrying all of them), newest first,
    as `suite results --json` prints them."""
    rows: list[RunRow] = []
    for model in load_runs(Path(results_dir)).values():
        for run in model.all_runs:
            s, h = run.s, run.headline
            if not has_tags(s, tags):
                continue
            invocation = getattr(s, "invocation", None)
            rows.append(RunRow(
                **dict(run_figures(s)), short_id=s.short_id, tags=s.tags, suite=s.suite,
                run_id=s.run_id, run_dir=str(run.run_dir), model=s.model, arm=s.arm, runtime=s.runtime,
                launcher=s.launcher, profile=s.profile, overrides=dict(invocation.overrides) if invocation else {},
                status=s.status, reason=s.reason, started_at=s.started_at, finished_at=s.finished_at,
                determinism=s.determinism.outcome, distinct_answers=h.distinct, requests=h.n,
                ttft_p50_ms=h.ttft_p50_ms, tokens_per_s=h.tokens_per_s, clean_share=h.clean_share,
                clean_share_se=h.clean_share_se, signature=s.signature.digest if s.signature else None))
    rows.sort(key=lambda r: (r.started_at, r.run_id), reverse=True)
    return rows
