"""The `suite` command line: one place turns user errors into one line and a non-zero exit.

Commands: models, runtimes, doctor, setup, up, bench, gate, results, export, site, compare,
study sessions, watch; `suite --version`.

Conventions a script can rely on: a usage error (a bad number, a missing argument, an unknown
option, choice or command) and any bad input the suite checks before it starts anything (an
unknown control, a judge that does not answer, a card or file it cannot read, a results folder
a bench could not write to, a name that is empty or not one folder's) is one line on stderr
naming the option and the value (a long one cut short), exit status 2, nothing started and
nothing written.
`--json` puts JSON alone on stdout (results, compare, doctor, the bench's final table; a run's
latency percentiles in ms, tokens/s and J/token among it). `compare` exits 1 when a gate prompt's
modal answers differ; `bench`/`gate --fail-on-variance` exit 1 when a gate prompt gave more than
one answer; `bench`, `gate` and `study sessions` exit 1 when no arm could run here. The command
line and its `--tag KEY=VALUE` labels go into every run record, with the suite's version and git
commit (`suite --version`). A run is named by its id, a unique prefix of it, or the 8-character
id printed for it. Help is plain text: TEXT/INTEGER/PATH placeholders, choices listed, defaults whole.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

import rich.markup
import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from suite import progress
from suite.errors import SuiteError
from suite.launchers import CHOICES as LAUNCHER_CHOICES
from suite.lifetime import REGISTRY
from suite.profiles import PROFILES
from suite.progress import PlainTable as Table
from suite.sanitize import PrintableFormatter, SafeConsole
from suite.stages import ORDER, STAGES, VERDICT_STAGE
from suite.stages.base import Stage
from suite.stages.sessions import STAGE as SESSIONS_STAGE

# Plain help (rich_markup_mode None): text wrapped at the terminal's width, never cut with an ellipsis.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="A reproducibility-first benchmark suite for LLM inference runtimes.")
def _console(stderr: bool = False) -> Console:
    """The commands' console: a terminal's own width; 160 columns when the output is a file or a
    pipe (a log), unless COLUMNS says otherwise, so a table is not folded at 80."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not (hasattr(stream, "isatty") and stream.isatty()) and not os.environ.get("COLUMNS")
    return SafeConsole(stderr=stderr, width=160 if wide else None)


console = _console()
log = logging.getLogger("suite")
LAUNCHER_HELP = ("auto (per arm: local where the runtime has a local recipe for this platform, else "
                 "Docker), local or docker.")
RESULTS_HELP = "Results folder (default: $RESULTS, else ./results)."
JSON_HELP = "Print JSON on stdout instead of a table (progress and log lines stay on stderr)."
TAG_HELP = ("A label of the runs, KEY=VALUE (e.g. driver=575.57); give it more than once for several. "
            "Kept in the run record, shown by `suite results` and filterable there with --tag.")
_TAG = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})=(.{0,200})$")
# Choices shown as choices in --help and refused by the parser (exit 2) before anything starts.
if TYPE_CHECKING:
    ProfileName = str  # the checker sees a name; typer sees the choices
else:
    ProfileName = Literal[tuple(PROFILES)]
LauncherName = Literal[LAUNCHER_CHOICES]  # type: ignore[valid-type]
ExportFormat = Literal["parquet", "csv"]
ResultsFormat = Literal["table", "md", "csv", "json"]
STAGES_HELP = (f"Stages to run, comma-separated, of: {', '.join(STAGES)} (default: {', '.join(ORDER)}, and the "
               "stages the profile, the options or the gate's verdict add).")


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None




def _tags(values: list[str] | None) -> dict[str, str]:
    """`--tag KEY=VALUE` given any number of times, as a mapping; a tag that is not KEY=VALUE, or a
    key given twice, is one line."""
    out: dict[str, str] = {}
    for value in values or []:
        m = _TAG.match(value)
        if m is None or "\n" in value:
            raise SuiteError(f"--tag {value!r}: give KEY=VALUE (a key of letters, digits, '.', '_' or '-', "
                             "at most 64 characters; a value of one line, at most 200)")
        if m[1] in out:
            raise SuiteError(f"--tag {value!r}: the key {m[1]!r} is given twice ({out[m[1]]!r} first)")
        out[m[1]] = m[2]
    return out




def _shown(value: str, width: int = 48) -> str:
    """A value as an error line quotes it: repr'd (control characters escaped), cut to `width`
    characters with its length said, so a long value never floods the line."""
    if len(value) <= width:
        return repr(value)
    return f"{value[:width]!r}... ({len(value)} characters)"


def _check_name(option: str, value: str | None) -> None:
    """A name given with `option` (a model, an arm, a runtime), checked before anything starts:
    empty, too long, a control character, a path separator or ".." is one line naming the option."""
    from suite.records import name_problem

    problem = None if value is None else name_problem(value)
    if problem is not None:
        raise SuiteError(f"{option} {_shown(value or '')}: {problem}")


def _names(option: str, value: str | None) -> list[str] | None:
    """A comma-separated list of names (`--arms a,b`), each checked; given but naming none (`''`,
    `,`) is one line, never every one."""
    if value is None:
        return None
    names = _split(value)
    if not names:
        raise SuiteError(f"{option} {_shown(value)}: names nothing; give one or more names, comma-separated")
    for name in names:
        _check_name(option, name)
    return names


def _results_path(text: str) -> Path:
    """The value of every `--results`, as typed: empty (the current folder), a NUL, or a name too
    long for the file system is one line naming the option, before the command reads or starts
    anything."""
    from suite.paths import path_problem

    problem = path_problem(text)
    if problem is not None:
        raise SuiteError(f"--results {_shown(text)}: {problem}")
    return Path(text)


def _writable_results(folder: Path | None) -> Path:
    """The results folder a command writes to (--results, else $RESULTS, else ./results), checked
    as `bench` checks it: a file there, or a folder this user cannot write to, is one line."""
    from suite.bench.request import _check_results_folder
    from suite.paths import results_dir

    try:
        path = folder.expanduser().resolve() if folder is not None else results_dir()
        _check_results_folder(path)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of symbolic links
        path = folder if folder is not None else Path(os.environ.get("RESULTS") or "results")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SuiteError(f"--results {_shown(str(path))}: {reason}") from None
    return path


def _show_version(value: bool) -> None:
    """`suite 0.1.0 (commit 1a2b..., tree modified)`: the version, and the git commit of the code
    with whether tracked files differ from it (every new run record keeps the same)."""
    if value:
        from suite.provenance import suite_build

        console.print(f"suite {suite_build().text()}", highlight=False, soft_wrap=True)
        raise typer.Exit(0)


@app.callback()
def _setup_logging(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
                   version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                                help="Print the suite's version, git commit and whether the tree was modified, and exit.")) -> None:
    handler: logging.Handler
    if progress.interactive():
        handler = RichHandler(console=progress.console(), show_path=False, show_time=True)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        # a log file or a pipe: one plain line per record, never wrapped or padded to a width
        handler = logging.StreamHandler(progress.console().file)
        handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)-7s %(message)s", datefmt="%H:%M:%S"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True)
    for noisy in ("httpx", "httpcore", "docker", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.command()
def models() -> None:
    """List the model cards of the catalog, with their formats and arms."""
    from suite.catalog import is_prepared, load_catalog

    table = Table("model", "title", "formats", "arms (runtime: format)")
    for card in load_catalog().values():
        fmts = ", ".join(f"{n}{' ✓' if is_prepared(card, n) else ''}" for n in card.formats)
        arms = ", ".join(f"{n} ({a.runtime}: {a.format})" for n, a in card.arms.items())
        table.add_row(*progress.cells(card.name, card.title, fmts, arms))
    console.print(table)


@app.command()
def runtimes() -> None:
    """List the runtime definitions (images/, and the folders SUITE_IMAGES adds), with their controls and install state."""
    from suite.definitions import load_definitions
    from suite.launchers.local import is_installed

    table = Table("runtime", "platforms", "determinism mode", "controls", "installed here")
    for d in load_definitions().values():
        table.add_row(d.name, ",".join(d.platforms), d.determinism_control or "not offered",
                      ", ".join(d.controls) or "-", "yes" if is_installed(d) else ("-" if d.local is None else "no"))
    console.print(table)


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
           results_folder: Path | None = typer.Option(None, "--results", help=RESULTS_HELP + " Its state is "
                                                      "reported: there or not yet, writable, free disk.",
                                                      parser=_results_path)) -> None:
    """What this machine has: Docker, NVIDIA driver/NVML, disk, caches, results folder, installed runtimes.

    A --results that a bench could not write to (a file, a folder this user cannot write) is one
    line and exit 2; the default results folder's state is a row of the table."""
    from suite.catalog import is_prepared, load_catalog
    from suite.definitions import load_definitions
    from suite.launchers.local import is_installed
    from suite.paths import cache_dir
    from suite.probes import detect_hardware

    results_row = _results_state(_writable_results(results_folder) if results_folder is not None else None)
    hw = detect_hardware()
    table = Table("check", "state")
    table.add_row("cpu", f"{hw.cpu} ({hw.cores} cores, {hw.memory_gb} GiB)")
    table.add_row("gpu", f"{hw.gpu} (driver {hw.gpu_driver}, CUDA {hw.cuda})" if hw.gpu else "no NVIDIA driver / NVML")
    try:
        import docker

        client = docker.from_env(timeout=5)
        info = client.info()
        runtimes_ = ", ".join(info.get("Runtimes", {}))
        table.add_row("docker", f"engine {info.get('ServerVersion')} (runtimes: {runtimes_})")
    except Exception as exc:  # any failure means: no usable engine
        table.add_row("docker", f"unavailable: {type(exc).__name__}: {str(exc)[:120]}")
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(cache).free / 2**30
    table.add_row("cache", f"{cache} ({free:.0f} GiB free)")
    table.add_row("results", results_row)
    for d in load_definitions().values():
        if d.local:
            table.add_row(f"runtime {d.name}", "installed" if is_installed(d) else "not installed")
    for card in load_catalog().values():
        for fmt in card.formats:
            if is_prepared(card, fmt):
                table.add_row(f"model {card.name}/{fmt}", "prepared")
    # Where each arm would run with the default launcher (auto), or what it needs.
    from suite.launchers import launcher_for

    definitions = load_definitions()
    for card in load_catalog().values():
        for arm_name, arm in card.arms.items():
            definition = definitions.get(arm.runtime)
            if definition is None:
                table.add_row(f"arm {card.name}/{arm_name}", f"unknown runtime {arm.runtime!r}")
                continue
            chosen = launcher_for(definition, "auto", card.gpu_memory_gb, gpus=arm.gpus(definition))
            state = (f"launcher {chosen.name}" if chosen.name != "none"
                     else f"cannot run here: {getattr(chosen, 'reason', '')}".replace(": see `suite doctor`", ""))
            way = python_way_line(definition, arm.version)
            table.add_row(f"arm {card.name}/{arm_name}", state + (f"; {way}" if way else ""))
    if as_json:
        _print_json([{"check": check, "state": state} for check, state in zip(*(c.cells for c in table.columns), strict=True)])
        return
    console.print(table)


def _results_state(checked: Path | None) -> str:
    """The results folder's row of `suite doctor`: where it is, whether it is there yet, whether a
    bench can write to it and the free disk. `checked`: a --results already checked (None: the
    default, $RESULTS else ./results, whose problem is said in the row, not as an error)."""
    if checked is None:
        try:
            checked = _writable_results(None)
        except SuiteError as exc:
            return f"not usable: {str(exc).removeprefix('--results ')}"
    probe = checked
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free / 2**30
    there = "there, writable" if checked.is_dir() else f"not there yet: a bench makes it in {probe}, writable"
    return f"{checked} ({there}; {free:.0f} GiB free)"


def python_way_line(definition: Any, version: str | None) -> str | None:
    """Which way a Python runtime's arm would get its interpreter (its venv, a wheelhouse, an existing
    environment), for `suite doctor`."""
    from suite.definitions import with_version
    from suite.launchers import pyenv
    from suite.launchers.local import install_prefix

    if definition.local is None or not definition.local.python_env:
        return None
    try:
        pinned = with_version(definition, version)
    except SuiteError as exc:
        return str(exc)
    return pyenv.describe(pinned, install_prefix(pinned) / definition.local.installed_marker)


@app.command()
def setup(model: str = typer.Option("tiny", help="Model whose arms to prepare."),
          runtime: str | None = typer.Option(None, help="Only this runtime (comma-separated list)."),
          launcher: LauncherName = typer.Option("auto", help=LAUNCHER_HELP)) -> None:
    """Install the runtimes and prepare the model formats of a model's arms (reused when present).

    An arm that cannot run here is left out with one line saying what it needs; when no arm can,
    the lines are errors and the exit status is 1 (so `make bench` stops before benchmarking).
    """
    import time

    from suite.bench import plan_arms
    from suite.catalog import prepare_format, prepared_model

    _check_name("--model", model)
    wanted = _names("--runtime", runtime)
    every = plan_arms(model, None, launcher, "quick")
    known = list(dict.fromkeys(p.runtime.name for p in every))
    unknown = [w for w in wanted or [] if w not in known]
    if unknown:
        raise SuiteError(f"--runtime {unknown[0]}: no arm of model {model!r} runs it; its runtimes: {', '.join(known)}")
    plans = [p for p in every if not wanted or p.runtime.name in wanted]
    unavailable = [p for p in plans if not p.launcher.can_run]
    err = SafeConsole(stderr=True)
    for plan in unavailable:
        line = rich.markup.escape(f"{plan.card.name}/{plan.arm_name} {plan.launcher.reason}")  # type: ignore[attr-defined]
        err.print(f"[red]error:[/red] {line}" if len(unavailable) == len(plans) else f"skipped: {line}",
                  highlight=False, soft_wrap=True)
    if plans and len(unavailable) == len(plans):
        raise typer.Exit(1)
    ready = [p for p in plans if p not in unavailable]
    # the formats first: a random-weight or quantised checkpoint needs the tools (torch,
    # transformers), not the runtime, so it is built before a runtime is installed or checked
    for fmt_name in dict.fromkeys(p.arm.format for p in ready):
        t0 = time.monotonic()
        path = prepare_format(ready[0].card, fmt_name)
        console.print(f"model {ready[0].card.name}/{fmt_name}: {path} ({time.monotonic() - t0:.0f} s)")
    for plan in ready:
        t0 = time.monotonic()
        plan.launcher.prepare(plan.runtime, prepared_model)
        console.print(f"runtime {plan.runtime.name}: ready ({time.monotonic() - t0:.0f} s)")


@app.command()
def up(runtime_or_arm: str = typer.Argument(..., metavar="ARM", help="Arm (or runtime) of the model to serve."),
       model: str = typer.Option("tiny", help="Model card."),
       launcher: LauncherName = typer.Option("auto", help=LAUNCHER_HELP),
       port: int | None = typer.Option(None, min=1, max=65535, help="Port (default: a free one)."),
       controls: str | None = typer.Option(None, help="Controls to apply, comma-separated.")) -> None:
    """Serve one arm of a model until Ctrl-C."""
    import time

    from suite.bench import check_controls, plan_arms
    from suite.catalog import get_card, prepare_format, prepared_model
    from suite.paths import cache_dir

    _check_name("--model", model)
    _check_name("ARM", runtime_or_arm)
    card = get_card(model)
    arm = runtime_or_arm if runtime_or_arm in card.arms else next(
        (n for n, a in card.arms.items() if a.runtime == runtime_or_arm), None)
    if arm is None:
        raise SuiteError(f"model {model!r} has no arm or runtime {runtime_or_arm!r}; known arms: {', '.join(card.arms)}")
    plan = plan_arms(model, [arm], launcher, "quick")[0]
    check_controls([plan], _split(controls))  # an unknown control: one line, before any install
    plan.launcher.prepare(plan.runtime, prepared_model)
    prepare_format(plan.card, plan.arm.format)
    spec = plan.spec(_split(controls) or [], cache_dir() / "logs" / f"up-{plan.runtime.name}.log")
    spec.port = port
    with plan.launcher.start(spec) as rt:
        console.print(f"{plan.runtime.name} serving {card.served_name!r} at {rt.base_url}/v1 "
                      f"(ready in {rt.startup_s:.1f} s; log: {rt.log_path}); Ctrl-C stops it")
        while rt.alive():
            time.sleep(0.5)
        raise SuiteError(f"{plan.runtime.name} {rt.ended() or 'exited'}; see {rt.log_path}")


def _print_summaries(summaries) -> None:
    table = Table("arm", "launcher", "status", "determinism", "distinct answers", "wall s", "record")
    for s in summaries:
        prompts = s.gate.prompts if s.gate else []
        distinct = ", ".join(f"{p.prompt_id}: {p.distinct_answers}/{p.requests}" for p in prompts) or "-"
        det = s.determinism.outcome + (f" ({s.determinism.control})" if s.determinism.control else "")
        if s.determinism.known_from:
            det += f", as in run {s.determinism.known_from}"
        table.add_row(*progress.cells(s.arm, s.launcher if s.status != "skipped" else "-",
                                      s.status + (f": {s.reason}" if s.reason else ""), det, distinct,
                                      f"{s.wall_s:.0f}" if s.wall_s else "-", s.run_id))
    console.print(table)
    for s in summaries:  # each stage's wall time, one line per arm (a column would squeeze the table)
        if s.stage_s:
            console.print(f"stages of {s.arm} (s): " + " · ".join(f"{name} {secs:.0f}" for name, secs in s.stage_s.items()),
                          markup=False, highlight=False, soft_wrap=True)


def _skipped_lines(summaries) -> list[str]:
    """One line per skipped arm: `model/arm needs ...; this machine has ...`."""
    return [f"{s.model}/{s.arm} {s.reason}" if (s.reason or "").startswith("needs ") else f"{s.model}/{s.arm}: {s.reason}"
            for s in summaries if s.status == "skipped"]


def _honest_exit(summaries) -> None:
    """No arm ran: one line per arm on stderr, exit 1. Some were skipped: list them, go on."""
    skipped = _skipped_lines(summaries)
    err = SafeConsole(stderr=True)
    if summaries and len(skipped) == len(summaries):
        for line in skipped:
            err.print(f"[red]error:[/red] {rich.markup.escape(line)}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    for line in skipped:
        err.print(f"skipped: {rich.markup.escape(line)}", highlight=False, soft_wrap=True)


# The exit status of a bench or gate in which an arm ran but measured less than it needed (a failed
# arm, every request failed, a gate short of its answers): apart from 1 (no arm could run, or
# --fail-on-variance found variance), so that a CI job never reads such a run as a pass.
EXIT_UNMEASURED = 3


def _unmeasured(summaries: list[Any]) -> list[str]:
    """`model/arm: why` for every arm that ran and measured less than it needed."""
    out: list[str] = []
    for s in summaries:
        if s.status == "skipped":
            continue
        gate = getattr(s, VERDICT_STAGE, None)
        if s.status in ("failed", "stopped-by-watchdog"):
            out.append(f"{s.model}/{s.arm}: {s.status}" + (f": {s.reason}" if s.reason else ""))
        elif gate is not None and gate.reproducible is None:
            out.append(f"{s.model}/{s.arm}: gate {gate.verdict}")
        elif gate is not None and gate.prompts and not any(p.answered for p in gate.prompts):
            out.append(f"{s.model}/{s.arm}: every gate request failed")
    return out


def _unmeasured_exit(summaries: list[Any]) -> None:
    """An arm that ran and measured less than it needed: one line each on stderr, exit 3."""
    lines = _unmeasured(summaries)
    if not lines:
        return
    err = SafeConsole(stderr=True)
    for line in lines:
        err.print(f"[red]not measured:[/red] {rich.markup.escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_UNMEASURED)


# Options of `suite bench` that choose where the arms run: a server the suite did not start
# (--url and what goes with it) and a Ray cluster (--ray, --ray-retries). Each stage's own options
# come from the stage registry (`Stage.options`); `_with_options` adds both kinds to the command.
DRIVER_OPTIONS: dict[str, tuple[Any, Any]] = {
    "url": (Optional[str], typer.Option(None, "--url", help="Benchmark a server the suite did not start: "  # noqa: UP045 - typer reads this annotation at run time
                                        "its OpenAI-compatible address, e.g. http://127.0.0.1:8080/v1 "
                                        "(key from SUITE_API_KEY).")),
    "served_model": (Optional[str], typer.Option(None, "--served-model", help="With --url: the model name "  # noqa: UP045 - typer reads this annotation at run time
                                                 "the server lists in /v1/models (default: its only one).")),
    "tokenizer": (Optional[str], typer.Option(None, "--tokenizer", help="With --url: the model's tokenizer "  # noqa: UP045 - typer reads this annotation at run time
                                              "(a tokenizer.json, a folder holding one, or hf:ORG/REPO[@REV]), "
                                              "to count the tokens of a server that does not count them.")),
    "ray_address": (Optional[str], typer.Option(None, "--ray", envvar="RAY_ADDRESS", metavar="ADDRESS",  # noqa: UP045 - typer reads this annotation at run time
                                                help="Run every arm as a task on a Ray cluster (host:port, "
                                                "'auto', ray://...; default: $RAY_ADDRESS): one arm at a time "
                                                "per node advertising suite_host; see docs/RAY.md.")),
    "ray_retries": (int, typer.Option(2, "--ray-retries", min=0, help="With --ray: times an arm is retried "
                                      "on another node after its node (or worker) was lost.")),
}


def _stage_parameter(stage: Stage, option: Any) -> inspect.Parameter:
    """A stage's option (`StageOption`) as a parameter of the command: its type, bound and help."""
    kind = option.kind
    if kind == "bool":
        annotation: Any = Optional[bool] if "/" in option.flag else bool  # noqa: UP045 - typer reads this annotation at run time
        default = typer.Option(None if "/" in option.flag else False, option.flag, help=option.help)
    elif kind == "int":
        annotation, default = Optional[int], typer.Option(None, option.flag, min=option.min, help=option.help)  # noqa: UP045 - typer reads this annotation at run time
    elif kind == "choice":
        assert stage.settings is not None
        annotation = Optional[stage.settings.model_fields[option.setting].annotation]  # noqa: UP045 - typer reads this annotation at run time
        default = typer.Option(None, option.flag, help=option.help)
    else:  # str, and lists typed as "a,b,c"
        annotation, default = Optional[str], typer.Option(None, option.flag, help=option.help)  # noqa: UP045 - typer reads this annotation at run time
    return inspect.Parameter(option.param, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _with_options(command: Any) -> Any:
    """`command` with the options of every stage of the registry and `DRIVER_OPTIONS` added: the
    parser (and --help) sees them all; `command` gets them in its `**options`."""
    own = inspect.signature(command)
    fixed = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
             for name, (annotation, default) in DRIVER_OPTIONS.items()]
    extra += [_stage_parameter(stage, option) for stage in STAGES.values() for option in stage.options]
    taken = [p.name for p in fixed + extra]
    clash = sorted({n for n in taken if taken.count(n) > 1})
    if clash:  # a stage's option named like another: said before the command runs
        raise SuiteError(f"suite bench: the option {clash[0]!r} is given by two owners")

    @functools.wraps(command)
    def with_options(**given: Any) -> Any:
        return command(**given)

    with_options.__signature__ = own.replace(parameters=[*fixed, *extra])  # type: ignore[attr-defined]
    with_options.__annotations__ = {**{k: v for k, v in command.__annotations__.items() if k != "options"},
                                    **{p.name: p.annotation for p in extra}}
    return with_options


def _stage_values(options: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]]]:
    """The stages' settings the command line gives (stage -> setting -> value; options not given
    left out) and the option that names each (an error names it)."""
    values: dict[str, dict[str, Any]] = {}
    names: dict[str, dict[str, str]] = {}
    for stage in STAGES.values():
        for option in stage.options:
            names.setdefault(stage.name, {})[option.setting] = option.name
            value = option.value(options.get(option.param))
            if value is not None:
                values.setdefault(stage.name, {})[option.setting] = value
    return values, names


def bench(model: str | None = typer.Option(None, help="Model card to benchmark (default: $MODEL, else tiny; "
                                               "with --url: the name its records go under, default external)."),
          arms: str | None = typer.Option(None, "--arms", help="Only these arms (comma-separated)."),
          launcher: LauncherName = typer.Option("auto", help=LAUNCHER_HELP),
          results_folder: Path | None = typer.Option(None, "--results", help=RESULTS_HELP, parser=_results_path),
          profile: ProfileName = typer.Option("standard", help="How many requests each stage makes."),
          stages: str | None = typer.Option(None, help=STAGES_HELP),
          resume: bool = typer.Option(False, help="Continue the newest incomplete run of each arm."),
          gate_requests: int | None = typer.Option(None, "--gate-requests", min=2, help="Identical requests per gate "
                                                      "prompt (default: the profile's; the studies used 200)."),
          site: bool = typer.Option(False, "--site/--no-site", help="Build the site afterwards."),
          fail_on_variance: bool = typer.Option(False, "--fail-on-variance", help="Exit 1 when any gate prompt "
                                                "of any arm gave more than one distinct answer (for CI)."),
          retry_refused: bool = typer.Option(False, "--retry-refused", help="Start each runtime's determinism "
                                             "mode even where this machine saw the same configuration refuse it "
                                             "(a refusal is remembered in the suite cache's refusals.json)."),
          as_json: bool = typer.Option(False, "--json", help="Print the final table as JSON on stdout "
                                       "(progress and log lines stay on stderr)."),
          tags: list[str] | None = typer.Option(None, "--tag", metavar="KEY=VALUE", help=TAG_HELP),
          **options: Any) -> None:
    """Benchmark every arm of a model: gate, latency, extraction, restarts; write the run records.

    Exits 1, with one line per arm saying what it needs and what this machine lacks, when no arm
    could run here; a bench where some ran lists the skipped ones and exits 0 (1 with
    --fail-on-variance when a gate prompt gave more than one answer). Bad input (a number, a
    choice, an unknown control, a judge that does not answer) is one line and exit 2 before any
    runtime starts.
    """
    from suite.bench import BenchRequest, run_bench
    from suite.stages import ORDER, place
    from suite.stages.controls import STAGE as CONTROLS_STAGE

    _check_name("--model", model)
    arm_names = _names("--arms", arms)
    out = _writable_results(results_folder)
    url, ray_address = options.get("url"), options.get("ray_address")
    if url is None:
        model = model or os.environ.get("MODEL") or "tiny"
        if options.get("tokenizer") is not None:
            raise SuiteError("--tokenizer counts the tokens of a server given with --url; a started runtime "
                             "counts its own")
    values, names = _stage_values(options)
    controls = values.get(CONTROLS_STAGE.name, {}).get("names")
    stage_list = _split(stages)
    if ray_address and (url is not None or resume or controls):
        given = "--url" if url is not None else "--resume" if resume else "--controls"
        raise SuiteError(f"--ray runs the catalog's arms on the cluster's nodes; {given} works on this machine only")
    if controls:
        stage_list = place(list(stage_list or ORDER), CONTROLS_STAGE.name)
    request = BenchRequest.build(
        model=model, arms=arm_names, launcher=launcher, profile=profile, stages=stage_list,
        gate_requests=gate_requests, stage_values=values, options=names, resume=resume, url=url,
        served_model=options.get("served_model"), tokenizer=options.get("tokenizer"), retry_refused=retry_refused,
        tags=_tags(tags), command=command_line(), site=site, results=out)
    if as_json:
        _stdout_for_json()
    if ray_address:
        from suite.distributed import run_bench_ray

        summaries = run_bench_ray(ray_address, request, max_retries=options.get("ray_retries", 2), console=console)
        _end_of_bench(summaries, request.results, as_json, fail_on_variance)
        if request.site:
            _build_site(request.results)
        return
    rebuilder = _SiteRebuilder(request.results) if request.site else None
    summaries = run_bench(request, on_arm=rebuilder.after_arm if rebuilder else None,
                          on_result=rebuilder.after_stage if rebuilder else None)
    _end_of_bench(summaries, request.results, as_json, fail_on_variance)


app.command("bench")(_with_options(bench))






def command_line() -> list[str]:
    """This process's command line as the user typed it (`suite ...`), secrets redacted: it goes into
    the run records."""
    from suite.secrets import redact_args

    return redact_args(["suite", *sys.argv[1:]])


def _stdout_for_json() -> None:
    """--json: stdout carries the JSON alone; every other line this command prints goes to stderr."""
    global console
    console = _console(stderr=True)


def _summary_json(s: Any) -> dict[str, Any]:
    """One arm of the bench's final table, as `--json` prints it."""
    from suite.run_figures import run_figures

    failure = getattr(s, "failure", None)
    invocation = getattr(s, "invocation", None)
    return {
        "model": s.model, "arm": s.arm, "runtime": s.runtime, "launcher": s.launcher, "profile": s.profile,
        "overrides": dict(invocation.overrides) if invocation else {}, "status": s.status, "reason": s.reason,
        "failure": failure.model_dump(mode="json", exclude={"log_tail"}) if failure else None,
        "determinism": s.determinism.model_dump(mode="json"),
        # the verdict's stage (the gate), per prompt
        VERDICT_STAGE: [{"prompt_id": p.prompt_id, "distinct_answers": p.distinct_answers, "answered": p.answered,
                         "requests": p.requests} for p in (s.gate.prompts if s.gate else [])],
        "wall_s": s.wall_s, "stage_s": dict(s.stage_s), "run_id": s.run_id,
        "short_id": s.short_id if s.run_id != "-" else None, "tags": s.tags,
        "suite": s.suite.model_dump(mode="json") if s.suite else None,
        # latency percentiles in ms and tokens/s, J/token, and the run's claims
        **run_figures(s).model_dump(mode="json"),
    }


def _varied(summaries: list[Any]) -> list[str]:
    """`arm/prompt: N distinct of M` for every gate prompt that gave more than one answer."""
    return [f"{s.arm}/{p.prompt_id}: {p.distinct_answers} distinct of {p.answered}"
            for s in summaries for p in (s.gate.prompts if s.gate else []) if p.distinct_answers > 1]


def _end_of_bench(summaries: list[Any], out: Path, as_json: bool, fail_on_variance: bool) -> None:
    """The final table (or its JSON), the skipped arms, and the exit status a CI job reads."""
    if as_json:
        _print_json([_summary_json(s) for s in summaries])
    elif any(s.status != "skipped" for s in summaries):
        _print_summaries(summaries)
    _honest_exit(summaries)
    console.print(f"results: {out}", soft_wrap=True)
    varied = _varied(summaries)
    if fail_on_variance and varied:
        SafeConsole(stderr=True).print(f"[red]variance:[/red] {rich.markup.escape('; '.join(varied))}",
                                   highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    _unmeasured_exit(summaries)


@app.command()
def gate(model: str = typer.Option("tiny", help="Model card."),
         arms: str | None = typer.Option(None, "--arms", help="Only these arms (comma-separated)."),
         controls: str | None = typer.Option(None, help="'all' or control names: run the gate once per control set."),
         launcher: LauncherName = typer.Option("auto", help=LAUNCHER_HELP),
         profile: ProfileName = typer.Option("standard", help="How many requests each stage makes."),
         results_folder: Path | None = typer.Option(None, "--results", help=RESULTS_HELP, parser=_results_path),
         fail_on_variance: bool = typer.Option(False, "--fail-on-variance", help="Exit 1 when any gate prompt "
                                               "gave more than one distinct answer (for CI)."),
         tags: list[str] | None = typer.Option(None, "--tag", metavar="KEY=VALUE", help=TAG_HELP)) -> None:
    """Run the reproducibility gate (and, with --controls, the control matrix) for every arm.

    Exits 1, with one line per arm saying what it needs, when no arm could run here (as `bench`).
    Control names are checked against each arm's runtime before anything starts (one line, exit 2).
    """
    from suite.bench import BenchRequest, run_bench
    from suite.stages import controls as controls_stage
    from suite.stages import gate as gate_stage
    from suite.stages import place

    _check_name("--model", model)
    arm_names = _names("--arms", arms)
    out = _writable_results(results_folder)
    stages = [gate_stage.STAGE.name]
    if controls:
        stages = place(stages, controls_stage.STAGE.name)
    run_tags = _tags(tags)
    names = _split(controls)
    summaries = run_bench(BenchRequest.build(
        model=model, arms=arm_names, launcher=launcher, profile=profile, stages=stages, results=out,
        stage_values={controls_stage.STAGE.name: {"names": names}} if names else None, command=command_line(),
        tags=run_tags))
    if any(s.status != "skipped" for s in summaries):
        _print_summaries(summaries)
    _honest_exit(summaries)
    from suite.stages.controls import format_controls_table

    for s in summaries:
        if s.controls:
            console.print(format_controls_table(s.controls))
    varied = _varied(summaries)
    if fail_on_variance and varied:
        SafeConsole(stderr=True).print(f"[red]variance:[/red] {rich.markup.escape('; '.join(varied))}",
                                   highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    _unmeasured_exit(summaries)


class _SiteRebuilder:
    """Rebuilds the site after each stage's result and after each arm, and says where the model's
    page is the first time it exists: the first gate's page can be read while the rest runs."""

    def __init__(self, results: Path) -> None:
        self.results = results
        self.shown: set[str] = set()

    def after_arm(self, summary: Any) -> None:
        if summary.status != "skipped":
            self.rebuild(summary.model)

    def after_stage(self, model: str, stage: str) -> None:
        self.rebuild(model)

    def rebuild(self, model: str) -> None:
        from suite.paths import site_out_dir
        from suite.site.publish import build_site

        out_dir = site_out_dir()
        try:
            build_site(self.results, out_dir)
        except (SuiteError, OSError) as exc:  # a full disk, say: the bench goes on all the same
            reason = str(exc) if isinstance(exc, SuiteError) else f"{out_dir}: {exc.strerror or exc}"
            console.print(f"[yellow]site not rebuilt:[/yellow] {escape(reason)}")
            return
        from suite.site.figures import slug

        page = out_dir / "models" / f"{slug(model)}.html"
        if model not in self.shown and page.exists():
            self.shown.add(model)
            console.print(f"site: {page} (rebuilt after each stage: reload it as the bench goes on)", soft_wrap=True)


def _build_site(results: Path | None = None, out: Path | None = None) -> None:
    from suite.paths import results_dir, site_out_dir
    from suite.site.publish import build_site

    out_dir = out or site_out_dir()
    report = build_site(results or results_dir(), out_dir)
    console.print(f"site: {out_dir / 'index.html'} ({report})", soft_wrap=True)


@app.command("site")
def site_cmd(out: Path | None = typer.Option(None, help="Where the website is written (default: $SITE_OUT, "
                                              "else site/public in the suite's folder): emptied and rebuilt on "
                                              "every build, so it must be a folder this suite built (or a new "
                                              "one) apart from the results; open its index.html."),
             results_folder: Path | None = typer.Option(None, "--results", help=RESULTS_HELP, parser=_results_path)) -> None:
    """Build the static website from the results folder (no server needed: the pages open from disk)."""
    _build_site(results=_results(results_folder), out=out)


def _results(folder: Path | None) -> Path:
    """--results, else $RESULTS, else ./results; a folder that is not there is one line (exit 2)."""
    from suite.paths import results_dir

    try:
        path = folder.expanduser().resolve() if folder else results_dir()
        there = path.is_dir()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of symbolic links
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SuiteError(f"--results {_shown(str(folder or os.environ.get('RESULTS') or 'results'))}: {reason}") from None
    if folder is not None and not there:
        raise SuiteError(f"--results {folder}: no such folder")
    return path


def _check_run_ref(label: str, ref: str) -> None:
    """A run as `compare` is given it (an id, a prefix of one, a short id, or a run folder),
    checked before any folder is read: empty (it would name the current folder), a NUL, or too
    long for the file system is one line naming the argument."""
    from suite.paths import path_problem

    if not ref:
        raise SuiteError(f"{label} '': empty; give a run id, a unique prefix of one, the 8-character id "
                         "printed for a run, or a run folder")
    problem = path_problem(ref)
    if problem is not None:
        raise SuiteError(f"{label} {_shown(ref)}: {problem}")


def _print_json(data: Any) -> None:
    """JSON on stdout, nothing else there (log and progress lines go to stderr)."""
    import json

    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


@app.command()
def results(results_folder: Path | None = typer.Option(None, "--results", help=RESULTS_HELP, parser=_results_path),
            fmt: ResultsFormat = typer.Option("table", "--format", help="table: one line per run in the "
                                              "terminal's width; md: a Markdown table to paste; csv; json: every "
                                              "field, in a versioned envelope."),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP + " The same as --format json: each run "
                                         "with its latency percentiles in ms, tokens/s, J/token, tags and the "
                                         "suite's commit, under `runs`, with `schema_version`."),
            tags: list[str] | None = typer.Option(None, "--tag", metavar="KEY=VALUE",
                                                     help="Only the runs tagged so (give it more than once: all of them).")) -> None:
    """List the run records in the results folder, newest first, with their tags."""
    from suite.site.publish import list_runs, runs_csv, runs_document, runs_markdown

    folder = _results(results_folder)
    wanted = _tags(tags)
    if as_json or fmt == "json":
        _print_json(runs_document(folder, wanted))
        return
    if fmt in ("md", "csv"):
        text = runs_markdown(folder, wanted) if fmt == "md" else runs_csv(folder, wanted)
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    console.print(list_runs(folder, wanted))


@app.command()
def export(format: ExportFormat = typer.Option("parquet", "--format", help="The files' format."),
           out: Path = typer.Option(Path("export"), help="Output folder."),
           results_folder: Path | None = typer.Option(None, "--results", help=RESULTS_HELP, parser=_results_path)) -> None:
    """Export the result tables (polars) as Parquet or CSV."""
    from suite.export import export_tables

    for path in export_tables(_results(results_folder), format, out):
        console.print(str(path))


study_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The studies' designs, one command each.")
app.add_typer(study_app, name="study")


@study_app.command(SESSIONS_STAGE.name)
def study_sessions(model: str = typer.Option("tiny", help="Model card."),
                   arms: str | None = typer.Option(None, "--arms", help="Only these arms (comma-separated)."),
                   sessions: int = typer.Option(8, "--sessions", min=2, help="Independent server processes (K)."),
                   replicates: int = typer.Option(3, "--replicates", min=2, help="Runs of each gate prompt per process (R)."),
                   lora: bool = typer.Option(False, "--lora", help="Also the test LoRA adapter, in the same processes."),
                   launcher: Literal["local", "docker"] = typer.Option("local", help="Where the server processes run."),
                   profile: ProfileName = typer.Option("quick", help="Which gate prompts and token caps."),
                   results_folder: Path | None = typer.Option(None, "--results", help=RESULTS_HELP, parser=_results_path),
                   tags: list[str] | None = typer.Option(None, "--tag", metavar="KEY=VALUE", help=TAG_HELP)) -> None:
    """Sessions x replicates (study 2): K server processes, R runs each, base and adapter compared.

    Exits 1, with one line per arm saying what it needs, when no arm could run here."""
    from suite.bench import BenchRequest, run_bench

    if sessions < 2 or replicates < 2:
        raise SuiteError(f"--sessions {sessions} --replicates {replicates}: each must be at least 2")
    _check_name("--model", model)
    arm_names = _names("--arms", arms)
    out = _writable_results(results_folder)
    summaries = run_bench(BenchRequest.build(
        model=model, arms=arm_names, launcher=launcher, profile=profile, stages=[SESSIONS_STAGE.name],
        results=out, stage_values={SESSIONS_STAGE.name: {"sessions": sessions, "replicates": replicates, "lora": lora}},
        options={SESSIONS_STAGE.name: {"sessions": "--sessions", "replicates": "--replicates", "lora": "--lora"}},
        command=command_line(), tags=_tags(tags)))
    if any(s.status != "skipped" for s in summaries):
        _print_summaries(summaries)
    _honest_exit(summaries)
    for s in summaries:
        for line in (s.sessions.table if s.sessions else []):
            console.print(f"{s.arm}: {escape(line)}")


@app.command()
def compare(run_a: str = typer.Argument(..., help="A run id (or a unique prefix of one), the 8-character id "
                                          "printed for a run, or a run folder."),
            run_b: str = typer.Argument(..., help="The run to compare it with (same model)."),
            results: Path | None = typer.Option(None, "--results", help=RESULTS_HELP, parser=_results_path),
            across_models: bool = typer.Option(False, "--across-models", help="Two cards of the same weights "
                                               "(e.g. tiny on CPU arms, tiny-gpu on GPU vLLM)."),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Do two runs of one model answer alike? Per gate prompt, and the configuration fields that differ.

    Exits 1 when a gate prompt answered in both runs is not shown to answer alike: its modal
    answers differ, or a run has no modal answer (its most common answers tie); 3 when no prompt
    was answered in both (a failed run: nothing compared); 0 when every prompt answered in both
    agrees. A CI job can fail on it.
    """
    from suite.compare import compare_runs

    for label, ref in (("RUN_A", run_a), ("RUN_B", run_b)):
        _check_run_ref(label, ref)
    cmp = compare_runs(run_a, run_b, _results(results), across_models)
    differ = any(p.modal_agree is False for p in cmp.prompts)
    tied = any((p.a_tied or p.b_tied) and p.a_answered and p.b_answered for p in cmp.prompts)
    parted = differ or tied
    # a prompt answered in one run only (a failed run) compares nothing: no pass, no "alike"
    compared = sum(1 for p in cmp.prompts if p.a_answered and p.b_answered)
    code = 1 if parted else (EXIT_UNMEASURED if not compared else 0)
    if as_json:
        _print_json(cmp.model_dump(mode="json") | {"modal_answers_differ": differ if compared else None,
                                                    "no_modal_answer": tied, "not_alike": parted,
                                                    "prompts_compared": compared})
        raise typer.Exit(code)
    console.print(f"A: {cmp.a.model}/{cmp.a.arm} {cmp.a.run_id}\nB: {cmp.b.model}/{cmp.b.arm} {cmp.b.run_id}",
                  markup=False, highlight=False)
    table = Table(title="gate prompts: modal answers")
    for col in ("prompt", "A distinct", "B distinct", "modal answers", "logprob Δ (nats)"):
        table.add_column(col)
    for p in cmp.prompts:
        table.add_row(*progress.cells(p.prompt_id, f"{p.a_distinct} of {p.a_answered}",
                                      f"{p.b_distinct} of {p.b_answered}", p.summary,
                                      "-" if p.logprob_diff is None else f"{p.logprob_diff:.3g}"))
    console.print(table)
    sig = Table(title="configuration fields that differ")
    for col in ("field", "A", "B"):
        sig.add_column(col)
    for d in cmp.signature_diff:
        sig.add_row(*progress.cells(d.key, d.a, d.b))
    console.print(sig if cmp.signature_diff else "configuration: no field differs")
    console.print(escape(cmp.verdict))
    if cmp.machines:
        console.print(escape(f"machines: {cmp.machines}"))
    if not compared:
        SafeConsole(stderr=True).print("[red]not compared:[/red] no gate prompt was answered in both runs",
                                       highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                               "help_option_names": []})
def watch(ctx: typer.Context) -> None:
    """Run the memory watchdog alone (same options as `python -m memwatch`; `suite watch --help` lists them)."""
    from memwatch.cli import _parser
    from memwatch.cli import main as memwatch_main

    if {"--help", "-h"} & set(ctx.args[:ctx.args.index("--")] if "--" in ctx.args else ctx.args):
        parser = _parser()
        parser.prog = "suite watch"  # its usage line names this command
        parser.print_help()
        raise typer.Exit(0)
    raise typer.Exit(memwatch_main(list(ctx.args)))


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _say_error(text: str) -> None:
    """`error: ...` on stderr as one line, whatever the text holds (a key or value with a line
    break in a user's file), never read as markup."""
    line = " ".join(str(text).splitlines())
    SafeConsole(stderr=True).print(f"[red]error:[/red] {rich.markup.escape(line)}", highlight=False, soft_wrap=True)


def main() -> None:
    # Ctrl-C, SIGTERM, SIGHUP (the terminal closed) and SIGQUIT stop the runtimes on every path,
    # also when the suite was started with SIGINT ignored (a background job of a non-interactive
    # shell). A kill -9 leaves no path: the kernel ends local runtimes then (parent-death signal).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, _sigterm)
    # Every runtime this process started is stopped first (suite.lifetime), then the above runs.
    REGISTRY.install_signal_handlers()
    from suite.stages import LOAD_ERRORS

    if LOAD_ERRORS:  # an installed stage that cannot be added: said before anything runs
        for line in LOAD_ERRORS:
            _say_error(line)
        sys.exit(2)
    try:
        # Without standalone mode typer returns the exit code (130 after Ctrl-C) instead of exiting.
        code = app(standalone_mode=False, prog_name="suite")
        if code == 130:
            raise KeyboardInterrupt
        if isinstance(code, int) and code:
            sys.exit(code)
    except SuiteError as exc:
        _say_error(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        SafeConsole(stderr=True).print("interrupted; runtimes stopped")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        SafeConsole(stderr=True).print("aborted")
        sys.exit(130)
    except Exception as exc:
        if not _parser_error(exc):
            raise
        # The parser's errors (typer 0.29 raises its vendored click's; a plugin may raise click's):
        # help asked by giving no arguments is shown as help; every other is one line, with the
        # error's own exit status (2 for every usage error: a bad value, a missing argument, an
        # unknown option or command).
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
            sys.exit(getattr(exc, "exit_code", 2))
        if type(exc).__name__ == "Abort":
            sys.exit(130)
        _say_error(usage_line(exc))
        sys.exit(getattr(exc, "exit_code", 2) or 2)


def _parser_error(exc: BaseException) -> bool:
    """Whether `exc` is one of the command-line parser's own errors: typer's (its vendored click's
    `ClickException` derives from `typer.TyperException`), or click's where click is installed."""
    if isinstance(exc, typer.TyperException):
        return True
    click = sys.modules.get("click")
    exceptions = getattr(click, "exceptions", None)
    return exceptions is not None and isinstance(exc, (exceptions.ClickException, exceptions.Abort))


def _friendly(cause: BaseException | None) -> tuple[Any, str] | None:
    """(the value given, what is wrong with it) from the validation error behind a bad parameter."""
    errors = getattr(cause, "errors", None)
    if not callable(errors):
        return None
    try:
        first = errors()[0]
    except Exception:  # noqa: BLE001 - not a pydantic error after all
        return None
    kind, ctx, msg = first.get("type", ""), first.get("ctx") or {}, str(first.get("msg", ""))
    if kind == "int_parsing" or kind == "int_from_float":
        msg = "not a whole number"
    elif kind == "float_parsing":
        msg = "not a number"
    elif kind == "bool_parsing":
        msg = "not true or false"
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        words = {"greater_than_equal": ("ge", "or more"), "greater_than": ("gt", "exclusive: more than"),
                 "less_than_equal": ("le", "or less"), "less_than": ("lt", "exclusive: less than")}[kind]
        bound = ctx.get(words[0])
        msg = f"must be {bound} {words[1]}" if words[1].startswith("or") else f"must be {words[1].split(': ')[1]} {bound}"
    else:
        msg = msg.removeprefix("Value error, ").rstrip(".")
        choice = re.match(r".* is not one of (.*)$", msg)
        if choice:  # a Literal's choices: listed plainly
            msg = "not one of " + ", ".join(c.strip().strip("'") for c in choice[1].split(","))
        else:
            msg = msg[:1].lower() + msg[1:]
    return first.get("input"), msg


def usage_line(exc: BaseException) -> str:
    """A parser error as one line naming the option (or argument, or command) and the value.

    `--restarts 'x': not a whole number (suite bench --help)`; `No such option: --nope`;
    `Missing argument 'RUN_B'`. Control characters and line breaks of the value are shown
    escaped, never as new lines."""
    param = getattr(exc, "param", None)
    ctx = getattr(exc, "ctx", None)
    where = f" ({ctx.command_path} --help)" if ctx is not None and getattr(ctx, "command_path", None) else ""
    if param is not None and type(exc).__name__ != "MissingParameter":
        opts = [o for o in (getattr(param, "opts", None) or []) if o.startswith("--")]
        name = max(opts, key=len) if opts else str(getattr(param, "human_readable_name", None) or param.name).upper()
        found = _friendly(exc.__cause__)
        message = getattr(exc, "message", None) or str(exc)
        if found is not None:
            value, message = found
            if repr(value) not in message and str(value) not in message:
                return _one_line(f"{name} {value!r}: {message}{where}")
        return _one_line(f"{name}: {message.rstrip('.')}{where}")
    format_message = getattr(exc, "format_message", None)
    message = format_message() if callable(format_message) else str(exc)
    return _one_line(f"{message.rstrip('.')}{where}")


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def _placeholder(annotation: Any) -> str | None:
    """The plain placeholder of an option's value in --help: its choices (`quick|standard|full`),
    else TEXT, INTEGER, NUMBER or PATH; None for a flag (it takes no value)."""
    import typing

    if typing.get_origin(annotation) is Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    inner = [a for a in typing.get_args(annotation) if a is not type(None)]
    if inner:  # Optional[X]: X's
        return _placeholder(inner[0])
    return {str: "TEXT", int: "INTEGER", float: "NUMBER", Path: "PATH"}.get(annotation)


def _plain_placeholders(typer_app: typer.Typer) -> None:
    """Every option of every command shows a plain placeholder (`--restarts INTEGER`, `--profile
    quick|standard|full`), never typer's `<str>` or `<bool>`; a metavar given by hand stays."""
    import inspect
    import typing

    for command in typer_app.registered_commands:
        if command.short_help is None and command.callback is not None and command.callback.__doc__:
            # the command list shows each command's first paragraph whole, wrapped, never cut at "..."
            command.short_help = " ".join(inspect.cleandoc(command.callback.__doc__).split("\n\n")[0].split())
        if command.callback is None:
            continue
        hints = typing.get_type_hints(command.callback, include_extras=False)
        for name, param in inspect.signature(command.callback).parameters.items():
            info = param.default
            if isinstance(info, typer.models.ArgumentInfo) and info.metavar is None:
                info.metavar = name.upper()  # `RUN_A`, as the usage line shows it
            if not isinstance(info, typer.models.OptionInfo) or info.metavar is not None:
                continue
            info.metavar = _placeholder(hints.get(name))
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _plain_placeholders(group.typer_instance)


def _plain_arguments() -> None:
    """An argument's help line names it alone (`ARM  Arm (or runtime) ...`) and the usage line shows
    it as `ARM`, not `ARM <str>` and `{ARM}` (typer has no setting for either; left as typer has
    them where its classes differ)."""
    argument = getattr(typer.core, "TyperArgument", None)
    if argument is not None and hasattr(argument, "display_type_rich") and hasattr(argument, "_usage_display_name"):
        argument.display_type_rich = lambda self, ctx: None
        argument._usage_display_name = lambda self: (self.display_name_raw if self.required
                                                      else f"[{self.display_name_raw}]")


_plain_placeholders(app)
_plain_arguments()

if __name__ == "__main__":
    main()
