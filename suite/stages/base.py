"""What every stage is built from: the `Stage` record, the context it runs with, a fresh launch.

A stage is one `Stage` object (name, result model, whether it needs fresh runtimes, `run`),
defined in its package's short `__init__.py` and registered in `suite.stages.STAGES`. The package
is in two halves. The record half, which `__init__.py` imports: its settings (and command-line
options) in `settings.py`, its records and the pure functions over them in `result.py` (and any
other module that sends no request), its page part in `view.py` and `section.html`. The run half:
the code that executes it in `run.py`, which alone imports the client and the launchers, named by
the record as `run="suite.stages.NAME.run:run"` and imported only when a bench runs the stage
(`Stage.runner()`), so that reading records, building the site or exporting loads none of it.
`run(ctx)` gets a
`StageContext` (the arm, its running runtime and client, the record, the earlier results) and
returns its result model, which the bench writes to `stages/<name>.json` and, at the end, under
the stage's name in `summary.json`. Its place in the schedule (`when`, `after`, `needs`,
`on_verdict`, `verdict`) and what `suite export` writes of it (`tables`, `exported_requests`) are
fields of the record too, so the bench and the export iterate the registry. `planned(profile)`, where a stage can say it in advance, is
how many requests it will send (the progress display's total and time left); every request line
a stage records passes through `StageContext.record_request`, which also advances that display.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

from pydantic import BaseModel, ValidationError

from suite import progress
from suite.errors import SuiteError

if TYPE_CHECKING:
    from suite.analysis.claims import Claim
    from suite.catalog import Arm, ModelCard, Sampling
    from suite.client import OpenAIClient
    from suite.definitions import RuntimeDefinition
    from suite.launchers.base import RunningRuntime
    from suite.profiles import Profile
    from suite.signature import Signature

log = logging.getLogger(__name__)
S = TypeVar("S", bound=BaseModel)

# A factory that starts a fresh runtime of the same configuration (optionally with extra
# controls) and yields it with a client; it is stopped when the block ends.
LaunchFactory = Callable[..., AbstractContextManager[tuple["RunningRuntime", "OpenAIClient"]]]

# Record lines that are not requests of their own (one per fact of an extraction answer): they
# do not advance the progress display.
NOT_REQUESTS = frozenset({"extraction-fact"})


class RunFolder(Protocol):
    """What a stage needs of the run record it writes into (`suite.records.RunRecord`): its folder
    and the request lines. The record store composes its summary from the stage registry, so the
    stages name only this much of it."""

    dir: Path

    def record_request(self, kind: str, **fields: Any) -> None: ...


@dataclass
class StageContext:
    card: ModelCard
    arm_name: str
    arm: Arm
    runtime: RuntimeDefinition
    profile: Profile
    sampling: Sampling
    signature: Signature
    record: RunFolder
    client: OpenAIClient
    running: RunningRuntime
    controls: list[str]  # controls active on the running runtime
    launch: LaunchFactory  # launch(controls=[...]) -> (runtime, client), fresh process/container
    reproducible: bool | None = None  # the gate's verdict, once known
    results: dict[str, Any] = field(default_factory=dict)  # earlier stages' results, by name
    judge: OpenAIClient | None = None
    stage: str = ""  # the stage now running: every request line says which stage sent it
    controls_request: list[str] = field(default_factory=lambda: ["all"])  # the control matrix's rows
    # Output tokens of every answered request each stage recorded (the stage's J/token divides by it).
    output_tokens: dict[str, int] = field(default_factory=dict)
    # The bench added the control matrix because the gate varied (the process of elimination):
    # the matrix then sends only the prompts that varied.
    automatic_controls: bool = False
    # A resumed run: per stage it was cut in, what that stage had finished, rebuilt from its request
    # lines (`Stage.rebuild`); the stage takes those parts up and runs only the rest.
    carried: dict[str, Any] = field(default_factory=dict)
    # Every stage's own settings, typed, as the bench's request resolved them (stage name ->
    # its settings object); `own` is the running stage's.
    settings: dict[str, BaseModel] = field(default_factory=dict)

    def own(self, model: type[S]) -> S | None:
        """The running stage's typed settings as the bench's request gave them (None in a context
        made outside a bench: the stage then resolves them from the profile)."""
        found = self.settings.get(self.stage)
        return found if isinstance(found, model) else None

    @property
    def run_dir(self) -> Path:
        return self.record.dir

    @property
    def base_url(self) -> str:
        return self.client.base_url

    def record_request(self, kind: str, **fields: Any) -> None:
        self.record.record_request(kind, stage=self.stage, signature_digest=self.signature.digest, **fields)
        if kind not in NOT_REQUESTS and not fields.get("error"):
            from suite.analysis.tokens import token_count

            n = token_count(fields.get("token_ids"), fields.get("completion_tokens"), fields.get("server_timings"),
                            fields.get("logprobs"))
            self.output_tokens[self.stage] = self.output_tokens.get(self.stage, 0) + (n or 0)
        if kind not in NOT_REQUESTS:
            progress.advance(failed=bool(fields.get("error")))


# The types a column of `suite export` may have: each table declares its columns with them, so a
# column has the same type in every export (also where every value of it is empty), and the tables
# of two results folders concatenate without a cast. A duration's or an energy's unit is in the
# column's name (`_ms`, `_s`, `_j`, `_w`, `_bytes`); a list is a list, a time a UTC timestamp.
ColumnType = Literal["str", "int", "float", "bool", "datetime", "list[str]", "list[int]", "list[float]"]


@dataclass(frozen=True)
class ExportTable:
    """One table of `suite export` a stage gives: its name (the file's), its rows for one run's
    result of the stage, and its columns with their types, in order (the export adds the run's key
    columns before them; a row's missing column is empty, a column it does not declare an error)."""

    name: str
    rows: Callable[[Any], list[dict[str, Any]]]
    columns: dict[str, ColumnType] = field(default_factory=dict)


def export_cell(v: Any) -> Any:
    """A value as one cell of a page's table: a list joined with commas, a mapping left out."""
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    if isinstance(v, dict):
        return None
    return v


def length_lists(text: str | None) -> tuple[list[int | None] | None, list[int] | None]:
    """`973 ×9, 993 ×11` (answer lengths in tokens with their counts) as two lists, ([973, 993],
    [9, 11]); an unknown length (`?`) is None; no text: (None, None)."""
    if not text:
        return None, None
    tokens: list[int | None] = []
    counts: list[int] = []
    for part in text.split(","):
        length, _, count = part.strip().partition("×")
        length = length.strip()
        tokens.append(None if length in ("?", "") else int(length))
        counts.append(int(count.strip() or 1))
    return tokens, counts


@dataclass(frozen=True)
class PageSection:
    """One arm's part of a stage's section on a model page, for a stage whose section the page does
    not draw by hand: a sentence (its verdict or summary) and a table. Every cell is text the page
    escapes."""

    sentence: str
    columns: list[str]
    rows: list[list[Any]]


def section_from_tables(tables: tuple[ExportTable, ...], result: Any, sentence: str = "") -> PageSection:
    """A stage's page section from its export tables: their rows for this result, one table (the
    columns of the first row), and `sentence` above it."""
    rows = [row for table in tables for row in table.rows(result)]
    columns = list(rows[0]) if rows else []
    return PageSection(sentence=sentence, columns=columns,
                       rows=[[export_cell(row.get(c)) for c in columns] for row in rows])


@dataclass(frozen=True)
class PageInputs:
    """What a stage's page view gets besides its own results (one per arm, None where that arm's
    runs never ran the stage): the page's arms in column order and its gate prompts in row order."""

    arms: list[str]
    prompt_ids: list[str]


def load_function(ref: str, what: str) -> Callable[..., Any]:
    """The function a "module:function" reference names, imported now: a stage's run, its page
    view, its first-screen part. One line naming `what` and the reference where it cannot load or
    is no function."""
    module, _, function = ref.partition(":")
    try:
        found = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SuiteError(f"{what} {ref!r}: cannot load it: {type(exc).__name__}: {exc}") from None
    if not callable(found):
        raise SuiteError(f"{what} {ref!r} is not a function")
    return cast(Callable[..., Any], found)


@dataclass(frozen=True)
class SectionTemplate:
    """A stage's own section of a model page, drawn by a template in the stage's folder.

    `template` is the file's name in the folder of the module that defines the stage (so a stage
    that is a package keeps its section beside its code); `view` names, as "module:function" and
    imported only when a page is built, the function that turns the stage's results (one per arm,
    in the page's column order) and the page's `PageInputs` into the template's variables. `slot`
    is the page's place for it ("answers": the gate's answers and beside them, before the arms
    compared; "causes": after the determinism mode; "measures": after those, before the watchdog),
    `order` its place among the slot's sections (the registry's order among equals); the page's
    table of contents lists the sections in that order (`suite.stages.page_sections`).
    A run's own page shows the same section for that run alone (the template's `run_page` is then
    True, and every list of one per arm has that run's alone), where the run has the stage's
    result, or where a stage every bench runs (`Stage.in_bench`) has none and the run did not fail
    (its section then says so); `on_run_page` False: nothing on a run's page."""

    template: str
    view: str
    slot: Literal["answers", "causes", "measures"]
    order: int = 0
    on_run_page: bool = True

    @property
    def view_parts(self) -> tuple[str, str]:
        """(module, function) of `view`; either is "" where it is not "module:function"."""
        module, _, function = self.view.partition(":")
        return module, function

    def variables(self, results: list[Any], page: PageInputs) -> dict[str, Any]:
        """The template's variables for these results (the view imported on first use)."""
        return dict(load_function(self.view, "page view")(results, page))


@dataclass(frozen=True)
class FirstScreen:
    """A stage's part of a model page's first screen ("what changes it?", "what does the fix
    cost?"), the one way every stage joins it, built in or from a package.

    `part` names, as "module:function" and imported only when a page is built, the function that
    turns one arm's `suite.stages.screen.FirstScreenInput` into its `FirstScreenPart` (or None);
    `order` is the part's place among the parts (the registry's order among equals): its causes
    are listed, its colour and cost weighed, in that order (suite.site.first_screen)."""

    part: str
    order: int = 0

    @property
    def part_parts(self) -> tuple[str, str]:
        """(module, function) of `part`; either is "" where it is not "module:function"."""
        module, _, function = self.part.partition(":")
        return module, function

    def function(self) -> Callable[[Any], Any]:
        """The part's function, imported now."""
        return load_function(self.part, "first-screen part")


# What `Stage.first_screen = "changes"` stands for: each claim that says the answer varies is a cause.
FAILING_CLAIMS = FirstScreen("suite.stages.screen:failing_claims")


@dataclass(frozen=True)
class StageOption:
    """One option of `suite bench` a stage brings with its settings: `flag` ("--batch-trials", or
    "--auto-controls/--no-auto-controls" for a switch) sets the stage's setting `setting`. `kind`
    is the value as typed: "int", "str", "bool" (a switch), "ints" (whole numbers separated by
    commas, e.g. 1,2,4), "strs" (names separated by commas) or "choice" (one of the setting's
    Literal values); `min` a bound the parser checks. A value the settings model refuses is one
    line naming the option."""

    flag: str
    setting: str
    help: str
    kind: Literal["int", "str", "bool", "ints", "strs", "choice"] = "str"
    min: int | None = None

    @property
    def name(self) -> str:
        """The option's first name (`--batch-trials`), as an error names it."""
        return self.flag.split("/")[0]

    @property
    def param(self) -> str:
        """The parameter name the command line gives its value under (`batch_trials`)."""
        return self.name.lstrip("-").replace("-", "_")

    def value(self, given: Any) -> Any:
        """The typed value as the settings model takes it (None: not given); a list option split at
        its commas, a bad whole number one line naming the option."""
        if given is None or (self.kind == "bool" and given is False and "/" not in self.flag):
            return None  # a plain switch not given leaves the profile's value
        if self.kind in ("ints", "strs"):
            items = [v.strip() for v in str(given).split(",") if v.strip()]
            if not items:
                return None
            if self.kind == "strs":
                return items
            try:
                return [int(v) for v in items]
            except ValueError:
                raise SuiteError(f"{self.name} {given!r}: give whole numbers separated by commas, "
                                 "e.g. 1,2,4") from None
        return given


# The preflight of a stage (`Stage.preflight`): given its settings for this bench and the bench's
# arm plans (each with `.card`, `.runtime`, `.arm_name`), it checks what it can before any runtime
# starts (a control name against every arm's runtime, a judge's endpoint) and returns its settings,
# completed where the check resolved something (the judge's model name); bad input is one line.
StagePreflight = Callable[[BaseModel, list[Any]], BaseModel]


@dataclass(frozen=True)
class Stage:
    """One stage: its name (the record's key), result model, and how it runs."""

    name: str
    result: type[BaseModel]
    # The function that runs it, `run(ctx)`: named as "module:function" (imported only when a bench
    # runs the stage, so that reading a record loads none of the code that sends requests), or the
    # function itself (a stage from another package may give either). `runner()` gives the function.
    run: Callable[[StageContext], BaseModel] | str
    fresh_runtimes: bool  # True: it stops the arm's runtime and starts its own
    in_bench: bool  # run by every bench (else on request: a flag, a profile or the gate's verdict)
    summary: str  # one line for `suite bench --help` and the architecture notes
    # The requests it will send for a profile, where that is known in advance (None, or 0 for a
    # profile where it is not known: the control matrix, whose rows depend on the runtime, or
    # sessions with an adapter the runtime may not serve): the progress display's total.
    planned: Callable[[Profile], int] | None = None
    # Loads and checks every file the stage will read for a profile (prompts, documents), so that
    # the bench's preflight finds a broken one before any runtime starts; raises a SuiteError.
    inputs: Callable[[Profile], object] | None = None
    # Its place in the schedule, for a stage that is not in every bench (`in_bench` False): `when`
    # says for which profiles it may run; with `on_verdict` None it is added before the run (where
    # `needs` are all in it too), right after the stage `after` (first, where that one is not in the
    # run); with `on_verdict` set it is added at the end of the run, once the stage that gives the
    # verdict (`verdict`) has run and said it (asked for by an option, it goes after `after`). A
    # stage the run asked for is never added twice.
    when: Callable[[Profile], bool] | None = None
    after: str | None = None
    needs: tuple[str, ...] = ()
    on_verdict: bool | None = None  # the reproducibility verdict that adds it (False: more than one answer)
    # The stage that gives the reproducibility verdict (the gate): its result's verdict, which reaches
    # the later stages through `StageContext.reproducible`.
    verdict: Callable[[Any], bool | None] | None = None
    # What `suite export` writes of it: its tables (each row of one run's result; the export puts
    # the run's key columns first) and the kinds of its request lines the `requests` table holds.
    tables: tuple[ExportTable, ...] = ()
    exported_requests: tuple[str, ...] = ()
    # The models of the request lines it writes (`suite.stages.lines`): the record store checks each
    # line against them before writing it, and reads them back by `kind`.
    lines: tuple[type[BaseModel], ...] = ()
    # Its section's name on a model page (None: no section of its own there; the reloads show in
    # the extraction's).
    page_title: str | None = None
    # Its section of a model page: a template of its own beside its code with the view that fills it
    # (`SectionTemplate`); or, with nothing to draw, a function from one arm's result to that arm's
    # `PageSection`, or "tables" for its export tables under the result's `verdict` (both drawn by
    # the page's generic section). None: the page draws none (or draws it itself).
    section: SectionTemplate | Callable[[Any], PageSection] | Literal['tables'] | None = None
    # Its own settings, for a stage whose settings are not fields of `Profile` (a stage added as its
    # own package): their model, and per profile name the values that differ from its defaults.
    # `settings_for(profile)` gives them; the run record keeps them with the profile's settings.
    settings: type[BaseModel] | None = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Profile fields that were its settings before they moved into its package, and the setting
    # each became: a run record written then is read with them in its stage settings.
    profile_keys: dict[str, str] = field(default_factory=dict)
    # Its options of `suite bench`, each setting one of its `settings` (`StageOption`): the command
    # line builds them from the registry, so a stage from its own package brings its own.
    options: tuple[StageOption, ...] = ()
    # Its check of the bench's request before any runtime starts (`StagePreflight`), run by the
    # bench's start-up for every stage with settings, whether or not it is in the run.
    preflight: StagePreflight | None = None
    # What a run that stopped before the stage's end (a time limit, a kill) had measured of it,
    # rebuilt from its request lines (`exported_requests` kinds) and the stages it finished (the
    # summary so far): the stage's result, saying what it rebuilt and what was cut; None where the
    # lines cannot say. Without it, a cut stage's page names the lines it kept, and no more. Its third
    # argument is the run's log folder (the runtime logs each launch left: which kernels a row ran).
    rebuild: Callable[[list[Any], Any, Path | None], BaseModel | None] | None = None
    # Its part of a model page's first screen ("what changes it?", "what does the fix cost?"):
    # a `FirstScreen` naming the function that makes it from the arm's runs and claims (the one
    # hook of every stage, built in or from a package); "changes", the plainest such part: each
    # claim that says the answer varies (good False) is a cause, named by the stage, its full text
    # one click away (`screen_part`). None: the first screen does not show it.
    first_screen: FirstScreen | Literal["changes"] | None = None
    # Its result checked against the run's request lines (`exported_requests` kinds), the record of
    # every request as sent and answered: the result as the lines make it, and one phrase per
    # disagreement with what the summary kept (named on the page beside the verdict). None: the
    # stage's result is read as stored.
    from_lines: Callable[[Any, list[Any]], tuple[Any, list[str]]] | None = None
    # On `--resume`, whether a request line (as a dict) of the cut stage belongs to a part its
    # `rebuild` gave back: such lines stay in the record, the rest go aside with the interruption.
    # None: the stage is run again whole (all its lines go aside).
    carries_line: Callable[[Any, dict[str, Any]], bool] | None = None
    # Its verdicts made again from what its result keeps (answers, launch outcomes, rows), with
    # today's statistics, whenever a record is read for a page, an export or `results`: a copy of the
    # result whose verdict fields are recomputed (suite.claims keeps the texts the run printed then,
    # for the page's note where they differ). None: the stage's figures need no recomputing.
    recompute: Callable[[Any, Any], BaseModel] | None = None
    # Its claims (suite.analysis.claims.Claim), computed from its (recomputed) result and the run's
    # summary: what the first screen, `--json` and the export's claims table render.
    claims: Callable[[Any, Any], list[Claim]] | None = None
    # Per kind of claim it makes, the closed vocabulary of its verdicts (each stage's `VERDICTS`,
    # made from its Literal types): a claim whose verdict is not among its kind's is a defect, named
    # by suite.claims. A stage that declares none (a package's own) is not checked.
    verdicts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def may_run(self, profile: Profile) -> bool:
        """Whether a stage not in every bench may be added to one with this profile."""
        return self.when is not None and bool(self.when(profile))

    def settings_for(self, profile: Profile) -> BaseModel | None:
        """Its settings for `profile`: the model's defaults, then the profile's values for this stage
        (`profiles`), then the run's own (`Profile.stage_settings`); a bad value is one line."""
        if self.settings is None:
            return None
        values = {**self.profiles.get(profile.name, {}), **profile.stage_settings.get(self.name, {})}
        try:
            return self.settings.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(x) for x in err["loc"]) or "(settings)"
            given = f" = {err['input']!r}" if err.get("type") != "missing" and not isinstance(err.get("input"), dict) else ""
            raise SuiteError(f"stage {self.name!r}, profile {profile.name!r}: setting {key}{given}: {err['msg']}") from None

    def page_section(self, result: Any) -> PageSection | None:
        """This stage's part of a model page for one arm's result, where it declares a `section`."""
        if self.section is None or result is None or isinstance(self.section, SectionTemplate):
            return None
        if self.section == "tables":
            return section_from_tables(self.tables, result, str(getattr(result, "verdict", "") or ""))
        return self.section(result)

    @property
    def screen_part(self) -> FirstScreen | None:
        """Its first-screen part's declaration ("changes" read as `FAILING_CLAIMS`), or None."""
        if isinstance(self.first_screen, FirstScreen):
            return self.first_screen
        return FAILING_CLAIMS if self.first_screen == "changes" else None

    @property
    def run_parts(self) -> tuple[str, str]:
        """(module, function) of a `run` given as "module:function"; ("", "") for a function."""
        if not isinstance(self.run, str):
            return "", ""
        module, _, function = self.run.partition(":")
        return module, function

    def runner(self) -> Callable[[StageContext], BaseModel]:
        """The function that runs the stage: `run` itself, or the function its "module:function"
        names, imported now (a bench calls this just before the stage runs)."""
        if not isinstance(self.run, str):
            return self.run
        return cast(Callable[["StageContext"], BaseModel], load_function(self.run, f"stage {self.name!r}: run"))

    @property
    def folder(self) -> Path:
        """The folder of the module that runs the stage (its package, for a stage that is one): for a
        `run` given as "module:function", found without importing that module."""
        if not isinstance(self.run, str):
            return Path(inspect.getfile(self.run)).parent
        module, _ = self.run_parts
        try:
            spec = importlib.util.find_spec(module) if module else None
        except (ImportError, ValueError) as exc:
            raise SuiteError(f"stage {self.name!r}: run {self.run!r}: cannot find its module: {exc}") from None
        if spec is None or spec.origin is None:
            raise SuiteError(f"stage {self.name!r}: run {self.run!r}: no module {module!r}")
        return Path(spec.origin).parent

    def requests_for(self, profile: Profile) -> int | None:
        """`planned(profile)`, or None when the stage cannot say (or the profile is one it refuses:
        the stage itself then says why, when it runs)."""
        if self.planned is None:
            return None
        try:
            return int(self.planned(profile)) or None
        except Exception as exc:  # noqa: BLE001 - a count for a progress bar never stops a bench
            log.debug("stage %s: no planned request count: %s", self.name, exc)
            return None


class FreshLaunch(BaseModel):
    """One fresh launch a stage made of the arm's configuration (restarts, sessions, reloads)."""

    index: int
    status: Literal["ok", "refused", "failed"]
    reason: str | None = None  # the log's error line when it did not start or failed
    startup_s: float | None = None

    def did_not_start(self, exc: Exception, refused: bool) -> None:
        """Record a launch that was refused (a start-up error) or could not run here."""
        self.status = "refused" if refused else "failed"
        self.reason = getattr(exc, "error_line", None) or str(exc)
