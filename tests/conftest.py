"""Shared fixtures: the tiny model's formats and real runtimes started on it.

Runtimes and models come from the suite's cache (`make test` installs them first through
`suite setup`). A fixture that needs a runtime that is not installed skips with the reason.
"""

from __future__ import annotations

import os
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Iterator

import pytest

from suite.catalog import ModelCard, get_card, prepare_format
from suite.definitions import RuntimeDefinition, get_definition
from suite.launchers.base import LaunchSpec
from suite.launchers.local import LocalLauncher, LocalRuntime, is_installed



def send_body(h: BaseHTTPRequestHandler, code: int, content_type: str, body: bytes) -> None:
    """A scripted server's whole reply: status, type, length, body."""
    h.send_response(code)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)

@pytest.fixture(scope="session")
def tiny_card() -> ModelCard:
    return get_card("tiny")


@pytest.fixture(scope="session")
def tiny_gguf(tiny_card: ModelCard) -> Path:
    return prepare_format(tiny_card, "gguf")


@pytest.fixture(scope="session")
def tiny_hf(tiny_card: ModelCard) -> Path:
    return prepare_format(tiny_card, "hf-bf16")


def installed_definition(name: str) -> RuntimeDefinition:
    definition = get_definition(name)
    if not is_installed(definition):
        pytest.skip(f"runtime {name} is not installed here (run `suite setup`)")
    return definition


def start_local(name: str, model_path: Path, tmp: Path, controls: list[str] | None = None,
                **spec_fields) -> LocalRuntime:
    """Start a real runtime of the catalog on the tiny model, with its definition's controls."""
    definition = installed_definition(name)
    env: dict[str, str] = {}
    args: list[str] = []
    refused: list[str] = []
    for c in controls or []:
        control = definition.control(c)
        env.update(control.env)
        args.extend(control.args)
        refused.extend(control.refused_patterns)
    spec = LaunchSpec(runtime=definition, model_path=model_path, served_name="tiny", seed=42,
                      context_length=4096, controls=list(controls or []), env=env, args=args,
                      log_path=tmp / f"{name}.log", startup_timeout_s=definition.server.startup_timeout_s,
                      refused_patterns=refused + list(spec_fields.pop("refused_patterns", [])), **spec_fields)
    return LocalLauncher().start(spec)


@pytest.fixture(scope="session")
def llamacpp_server(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    """One llama-server on the tiny GGUF for the whole test session."""
    rt = start_local("llamacpp", tiny_gguf, tmp_path_factory.mktemp("llamacpp"))
    with rt:
        yield rt


@pytest.fixture(scope="session")
def results_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("results")
    os.environ.setdefault("RESULTS", str(path))
    return path


# Fault injection: every test marked `fault` injects one fault and reports what it cost through
# `fault_report`; the session ends with one line over all of them (`make faults`, or
# `pytest -m fault`, runs every one in one go), e.g. "12 faults injected, 0 records lost or mixed, ...".
# A fault test that failed, or passed without reporting, is named on a line of its own: the sums
# cannot speak for it.
FAULT_OUTCOMES: list[dict] = []
FAULT_TESTS: dict[str, str] = {}  # nodeid -> outcome of each fault test that ran (a skip injected nothing)


@pytest.fixture
def fault_report(request: pytest.FixtureRequest):
    """Call `fault_report(records_lost=0, records_mixed=0, tracebacks=0, foreign_kills=0)` once the
    fault was injected and its outcome measured; the counts are summed over the session."""
    def report(*, records_lost: int = 0, records_mixed: int = 0, tracebacks: int = 0,
               foreign_kills: int = 0) -> None:
        FAULT_OUTCOMES.append({"fault": request.node.nodeid, "records_lost": records_lost,
                               "records_mixed": records_mixed, "tracebacks": tracebacks,
                               "foreign_kills": foreign_kills})
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "fault" in report.keywords and (report.when == "call" or report.failed):
        FAULT_TESTS[report.nodeid] = "failed" if report.failed else report.outcome


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if FAULT_OUTCOMES:
        lost = sum(o["records_lost"] + o["records_mixed"] for o in FAULT_OUTCOMES)
        tb = sum(o["tracebacks"] for o in FAULT_OUTCOMES)
        kills = sum(o["foreign_kills"] for o in FAULT_OUTCOMES)
        terminalreporter.write_line(
            f"{len(FAULT_OUTCOMES)} faults injected, {lost} records lost or mixed, {tb} tracebacks, "
            f"{kills} processes killed that the suite did not start")
    reported = {o["fault"] for o in FAULT_OUTCOMES}
    unsound = sorted(n for n, outcome in FAULT_TESTS.items()
                     if outcome == "failed" or (outcome == "passed" and n not in reported))
    if unsound:
        terminalreporter.write_line(f"{len(unsound)} fault tests failed or measured nothing: {', '.join(unsound)}")


# Fixtures that start a real runtime: a test that asks for one (directly or through another
# fixture) carries the `live` marker, as the tests that start their own carry it by hand, so that
# `-m live` selects every test on a real runtime and `-m "not live"` leaves them all out.
RUNTIME_FIXTURES = ("llamacpp_server",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in RUNTIME_FIXTURES):
            item.add_marker(pytest.mark.live)
