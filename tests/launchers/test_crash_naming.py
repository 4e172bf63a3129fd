"""A crash is named as one, at once.

A runtime that exits by a signal is "crashed: SIGSEGV (segmentation fault) 1.3 s after start", or
"crashed: SIGSEGV (segmentation fault) during stage gate after 2 of 5 requests": on the console
when it happens, in the run record (the summary's typed `failure`), and at the top of the arm on
the page with the last 20 lines of its log and a link to a copy of the log. The error line never
quotes an INFO line, nor the last line merely for being last. A failed arm's pages say what
failed and leave out the sections that did not run.

The runtimes here are real processes that really die by SIGSEGV: a stand-in runtime
(`tests/standin_runtime.py`) declared in a temporary images folder (`SUITE_IMAGES`), started by
the suite's local launcher like any runtime; no llama.cpp build is needed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from suite.launchers.base import exit_signal, exit_words, find_error_line, is_info_line, log_tail

ROOT = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parents[1] / "standin_runtime.py"
SECRET = "sk-standin-secret-4242"


def standin_images(folder: Path, modes: dict[str, list[str]]) -> Path:
    """A folder of runtime definitions, one per stand-in (name -> its extra arguments)."""
    for name, extra in modes.items():
        d = folder / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "install.sh").write_text('#!/bin/bash\nset -e\nmkdir -p "$1"\necho "stand-in" > "$1/.installed"\n')
        command = [sys.executable, str(STANDIN), "--port", "{port}", *extra]
        (d / "runtime.toml").write_text(
            f'name = "{name}"\ndescription = "a stand-in runtime ({name})"\n'
            'platforms = ["cpu"]\n\n[server]\nready_path = "/health"\nstartup_timeout_s = 30\n\n'
            f'[local]\ninstall = "install.sh"\ncommand = {json.dumps(command)}\n\n'
            '[capabilities]\nlogprobs = "none"\ntoken_ids = false\nformats = ["gguf"]\n')
    return folder


def standin_card(folder: Path, name: str, arms: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    text = (f'name = "{name}"\ntitle = "stand-ins"\nserved_name = "standin"\n\n'
            '[formats.f]\nkind = "gguf"\nsource = "path:model.gguf"\n')
    for arm in arms:
        text += f'\n[arms.{arm}]\nruntime = "{arm}"\nformat = "f"\n'
    (folder / f"{name}.toml").write_text(text)
    return folder


def suite_env(tmp: Path, images: Path, cards: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RESULTS", "MODEL", "SITE_OUT")}
    return {**env, "SUITE_IMAGES": str(images), "SUITE_CARDS": str(cards), "SUITE_CACHE": str(tmp / "cache"),
            "SUITE_JUDGE_API_KEY": SECRET, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}


def run_suite(args: list[str], env: dict[str, str], timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


class Node:
    """An element of a page, as the standard library's HTML parser reads it (no browser needed)."""

    VOID = {"br", "meta", "link", "img", "hr", "input", "col", "wbr"}

    def __init__(self, tag: str, attrs: dict[str, str], parent: "Node | None" = None):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list["Node | str"] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def all(self, tag: str | None = None, cls: str | None = None, id: str | None = None) -> list["Node"]:
        out = []
        for c in self.children:
            if isinstance(c, Node):
                if ((tag is None or c.tag == tag) and (cls is None or cls in c.attrs.get("class", "").split())
                        and (id is None or c.attrs.get("id") == id)):
                    out.append(c)
                out += c.all(tag, cls, id)
        return out

    def one(self, tag: str | None = None, cls: str | None = None, id: str | None = None) -> "Node | None":
        found = self.all(tag, cls, id)
        return found[0] if found else None

    def order(self) -> list["Node"]:
        return [self, *(n for c in self.children if isinstance(c, Node) for n in c.order())]


def parse(html: str) -> Node:
    from html.parser import HTMLParser

    root = Node("root", {})

    class P(HTMLParser):
        cur = root

        def handle_starttag(self, tag, attrs):  # noqa: ANN001
            node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
            self.cur.children.append(node)
            if tag not in Node.VOID:
                self.cur = node

        def handle_endtag(self, tag):  # noqa: ANN001
            n = self.cur
            while n is not root and n.tag != tag:
                n = n.parent  # type: ignore[assignment]
            if n is not root:
                self.cur = n.parent  # type: ignore[assignment]

        def handle_data(self, data):  # noqa: ANN001
            self.cur.children.append(data)

    P(convert_charrefs=True).feed(html)
    return root


# -- the words ------------------------------------------------------------------------------------

def test_exit_words_name_the_signal() -> None:
    assert exit_words(-signal.SIGSEGV) == "crashed: SIGSEGV (segmentation fault)"
    assert exit_words(-signal.SIGABRT) == "crashed: SIGABRT (aborted)"
    assert exit_words(-signal.SIGKILL) == "was killed by SIGKILL"
    assert exit_words(1) == "exited with status 1"
    assert exit_words(0) == "exited with status 0"
    assert exit_words(None) == "is no longer running"
    # a container's exit code, read as a shell does: 139 is 128 + SIGSEGV
    assert exit_words(139, shell_convention=True) == "crashed: SIGSEGV (segmentation fault; exit status 139)"
    assert exit_words(139) == "exited with status 139"
    assert exit_signal(-11) == "SIGSEGV" and exit_signal(3) is None and exit_signal(None) is None


INFO_LINES = [
    "INFO 12-01 18:00:00 [api_server.py:1] error_handler registered",
    "(APIServer pid=123) INFO 12-01 18:00:00 [core.py:9] failed requests: 0",
    'INFO:     127.0.0.1:5555 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error',
    "[info] cannot find a cached kernel, compiling",
    'time=2026-12-01 level=info msg="unable to load cache: none yet"',
    "I1201 18:00:00.000 server.cc:12] abort handler installed",
    "0.01.234.567 I slot release: error count 0",
    "DEBUG asyncio: exception handler set",
]


@pytest.mark.parametrize("line", INFO_LINES)
def test_an_info_line_is_never_the_error_line(line: str) -> None:
    assert is_info_line(line)
    assert find_error_line(f"starting\n{line}\n") is None


def test_the_last_line_is_not_an_error_line_for_being_last() -> None:
    """The old rule quoted the last line when nothing looked like an error: a crash without a
    word then 'explained' itself by an innocent line."""
    assert find_error_line("main: loading model\nsrv  load_model: loading model 'x.gguf'\n") is None
    assert find_error_line("") is None


@pytest.mark.parametrize("log,expected", [
    ("INFO x started\nERROR 12-01 [core.py:1] EngineCore failed to start\nINFO shutting down\n",
     "ERROR 12-01 [core.py:1] EngineCore failed to start"),
    ("load\n/src/ggml-cpu.c:123: GGML_ASSERT(n > 0) failed\n", "/src/ggml-cpu.c:123: GGML_ASSERT(n > 0) failed"),
    ("Traceback (most recent call last):\n  File x\nRuntimeError: CUDA error: out of memory\n",
     "RuntimeError: CUDA error: out of memory"),
    ("\x1b[31merror: unknown argument --nope\x1b[0m\n", "error: unknown argument --nope"),
    ("terminate called after throwing an instance of 'std::runtime_error'\n",
     "terminate called after throwing an instance of 'std::runtime_error'"),
    # an ERROR line that mentions INFO later is still an error line
    ("ERROR 12-01 cannot read INFO file\n", "ERROR 12-01 cannot read INFO file"),
    # vLLM 0.24.0 on an H200 whose HUMMING kernels were another release than its pin (the log's
    # own lines, shortened): the cause is the engine's TypeError, not the API server's
    # `raise RuntimeError(` source line nor the "see root cause above" wrapper after it
    ("(EngineCore pid=3597) ERROR 12-02 01:00:18 [core.py:1231] TypeError: quantize_weight() got an "
     "unexpected keyword argument 'has_global_scale'\n"
     "(EngineCore pid=3597)     raise e\n"
     "(EngineCore pid=3597) TypeError: quantize_weight() got an unexpected keyword argument 'has_global_scale'\n"
     '(APIServer pid=3466)   File "/t/vllm/v1/engine/utils.py", line 1272, in wait_for_engine_startup\n'
     "(APIServer pid=3466)     raise RuntimeError(\n"
     "(APIServer pid=3466)              ^^^^^^^^^^^^^\n"
     "(APIServer pid=3466) RuntimeError: Engine core initialization failed. See root cause above. "
     "Failed core proc(s): {}\n",
     "(EngineCore pid=3597) TypeError: quantize_weight() got an unexpected keyword argument 'has_global_scale'"),
    ('Traceback (most recent call last):\n  File "x.py", line 3, in start_error_handler\n'
     "    raise ValueError(msg)\nValueError: bad --max-model-len\n", "ValueError: bad --max-model-len"),
])
def test_error_lines_are_found(log: str, expected: str) -> None:
    assert find_error_line(log) == expected


def test_log_tail_keeps_the_last_lines_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUITE_JUDGE_API_KEY", SECRET)
    path = tmp_path / "runtime.log"
    path.write_text("".join(f"line {i}\n" for i in range(30)) + f"key {SECRET} url http://u:p@h/x\n\x1b[1mbold\x1b[0m\n\n")
    tail = log_tail(path, 20)
    assert len(tail) == 20 and tail[0] == "line 12" and tail[-1] == "bold"
    assert SECRET not in "\n".join(tail) and "u:p@" not in "\n".join(tail)
    assert log_tail(tmp_path / "missing.log") == [] and log_tail(None) == []
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert log_tail(empty) == []


# -- a real runtime dying by SIGSEGV, at start and mid-stage --------------------------------------

@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One bench of three stand-in arms: one crashes at start, one at its third completion (2
    answered), one serves. Then the site is built."""
    tmp = tmp_path_factory.mktemp("crash")
    images = standin_images(tmp / "images", {
        "segv-start": ["--mode", "segv-start", "--say", f"using key {SECRET} <script>alert(1)</script>"],
        "segv-mid": ["--mode", "segv-after", "--after", "2"],
        "same": ["--mode", "same"]})
    cards = standin_card(tmp / "cards", "crashy", ["segv-start", "segv-mid", "same"])
    env = suite_env(tmp, images, cards)
    results, site = tmp / "results", tmp / "site"
    bench = run_suite(["bench", "--model", "crashy", "--profile", "quick", "--stages", "gate,latency",
                       "--launcher", "local", "--results", str(results), "--restarts", "3", "--reloads", "1"], env)
    summaries = {p.parent.parent.name: json.loads(p.read_text()) for p in results.glob("crashy/*/*/summary.json")}
    built = run_suite(["site", "--results", str(results), "--out", str(site)], env, timeout=120)
    return {"bench": bench, "summaries": summaries, "results": results, "site": site, "built": built, "env": env}


def test_a_crash_at_start_is_named_on_the_console_at_once(crashed: dict) -> None:
    bench = crashed["bench"]
    # two arms measured less than they needed: never a pass (exit 3, one line each)
    assert bench.returncode == 3, bench.stdout + bench.stderr
    err = " ".join(bench.stderr.split())  # the log handler wraps long lines
    assert "not measured: crashy/segv-start: failed" in err and "not measured: crashy/segv-mid: failed" in err
    assert "not measured: crashy/same" not in err
    assert "Traceback" not in err + bench.stdout
    m = re.search(r"arm segv-start: crashed: SIGSEGV \(segmentation fault\) (\d+\.\d) s after start; "
                  r"no error line in its log \(log: (\S+)", err)
    assert m, err
    # said when it happened: before the next arm started, not only in the final table
    assert err.index(m[0]) < err.index("start segv-mid")
    # named by its signal, not by a raw status; the INFO line that mentions an error is not the cause
    assert "status -11" not in err and "error_handler registered" not in err


def test_a_crash_at_start_is_typed_in_the_record(crashed: dict) -> None:
    s = crashed["summaries"]["segv-start"]
    f = s["failure"]
    assert s["status"] == "failed"
    assert f["cause"] == "signal" and f["signal"] == "SIGSEGV" and f["exit_status"] is None
    assert re.fullmatch(r"crashed: SIGSEGV \(segmentation fault\) \d+\.\d s after start", f["what"])
    assert 0 < f["after_s"] < 30 and f["stage"] is None
    assert f["error_line"] is None  # the log has an INFO line saying "error_handler": not a cause
    assert s["reason"].startswith(f["what"])
    tail = f["log_tail"]
    assert tail[-1] == "srv  load_model: loading model 'model.gguf'" and len(tail) <= 20
    assert any("<script>" in ln for ln in tail)  # kept as data; escaped on the page
    run_dir = next(crashed["results"].glob("crashy/segv-start/*"))
    assert (run_dir / f["log_file"]).is_file() and f["log_file"].startswith("logs/")
    text = json.dumps(s) + (run_dir / "summary.json").read_text()
    assert SECRET not in text  # the log said the key; the record does not


def test_a_crash_mid_stage_keeps_what_was_measured(crashed: dict) -> None:
    s = crashed["summaries"]["segv-mid"]
    f = s["failure"]
    assert s["status"] == "failed"
    assert f["what"] == "crashed: SIGSEGV (segmentation fault) during stage gate after 2 of 5 requests"
    assert (f["stage"], f["requests_done"], f["requests_planned"]) == ("gate", 2, 5)
    assert f["signal"] == "SIGSEGV" and f["cause"] == "signal"
    assert s["reason"].startswith("the runtime crashed: SIGSEGV (segmentation fault) during stage gate after 2 of 5")
    assert f["log_tail"][-1].startswith("slot launch_slot_: id 0 | task 2")
    (p,) = s["gate"]["prompts"]
    assert p["answered"] == 2  # the answers before the crash are kept
    assert "crashed: SIGSEGV" in p["stopped_reason"]
    assert s["latency"] is None  # nothing ran on a dead runtime
    err = " ".join(crashed["bench"].stderr.split())
    assert "arm segv-mid: the runtime crashed: SIGSEGV (segmentation fault) during stage gate after 2 of 5" in err
    # the next arm still ran
    assert crashed["summaries"]["same"]["status"] == "complete", crashed["summaries"]["same"]["reason"]
    assert crashed["summaries"]["same"]["failure"] is None


def test_the_page_names_the_crash_at_the_top_of_the_arm(crashed: dict) -> None:
    assert crashed["built"].returncode == 0, crashed["built"].stderr
    site = crashed["site"]
    raw = (site / "models" / "crashy.html").read_text()
    page = parse(raw)
    card = page.one(id="arm-segv-start")
    block = card.one(cls="failure")
    assert block is not None
    what = block.one(cls="failure-what").text()
    assert re.fullmatch(r"crashed: SIGSEGV \(segmentation fault\) \d+\.\d s after start", what)
    # at the top of the arm: right after its status, before the runtime and profile line
    texts = [n.text() for n in card.all("p")]
    assert texts.index(what) < next(i for i, t in enumerate(texts) if "profile quick" in t)
    pre = block.one("pre", cls="log-tail")
    tail = pre.text().splitlines()
    assert tail[-1] == "srv  load_model: loading model 'model.gguf'"
    assert any("<script>alert(1)</script>" in ln for ln in tail)  # shown as text ...
    assert "<script>alert(1)" not in raw and "&lt;script&gt;alert(1)&lt;/script&gt;" in raw  # ... escaped
    assert block.one("pre", cls="errline") is None  # no error line in its log: none quoted
    link = block.one("summary").one("a").attrs["href"]
    log_copy = (site / "models" / link).resolve()
    assert log_copy.is_file() and "srv  load_model" in log_copy.read_text()
    assert SECRET not in log_copy.read_text() and SECRET not in raw
    # the headline of figures that do not exist is left out; what did not run is said once
    assert card.one(cls="headline") is None
    assert card.one(cls="not-run-after").text().strip() == "not run after the failure: gate, latency"
    mid = page.one(id="arm-segv-mid")
    assert mid.one(cls="failure-what").text() == \
        "crashed: SIGSEGV (segmentation fault) during stage gate after 2 of 5 requests"
    assert mid.one(cls="not-run-after").text().strip() == "not run after the failure: latency"
    assert mid.one(cls="headline") is not None  # its gate answered twice: that figure stands
    assert page.one(id="arm-same").one(cls="failure") is None  # the arm that served has none


def test_a_failed_runs_page_hides_the_sections_that_did_not_run(crashed: dict) -> None:
    site = crashed["site"]
    start = parse(next(site.glob("runs/*-segv-start.html")).read_text())
    assert [h.text() for h in start.all("h2")] == ["What failed"]
    assert start.one(cls="failure-what").text().startswith("crashed: SIGSEGV (segmentation fault)")
    mid = parse(next(site.glob("runs/*-segv-mid.html")).read_text())
    assert [h.text() for h in mid.all("h2")] == ["What failed", "Gate", "Watchdog"]
    ok = parse(next(site.glob("runs/*-same.html")).read_text())
    headings = [h.text() for h in ok.all("h2")]
    assert "What failed" not in headings and "Latency" in headings and "Restarts" in headings  # unchanged


def test_a_runtime_that_dies_during_the_in_launch_pairs_fails_that_row_with_its_own_error(tmp_path: Path) -> None:
    """A control tried inside one launch (a request field: its per-request form) whose runtime dies
    among the pairs: the row is failed with the runtime's own crash, never "ok"."""
    images = standin_images(tmp_path / "images", {"dies": ["--mode", "segv-after", "--after", "5"]})
    definition = images / "dies" / "runtime.toml"
    definition.write_text(definition.read_text() + '\n[controls.fieldy]\ndescription = "a request field"\n'
                          'extra_body = { fieldy = true }\n')
    cards = standin_card(tmp_path / "cards", "dying", ["dies"])
    env = suite_env(tmp_path, images, cards)
    results = tmp_path / "results"
    r = run_suite(["bench", "--model", "dying", "--profile", "quick", "--stages", "gate,controls", "--controls",
                   "fieldy", "--gate-requests", "3", "--launcher", "local", "--results", str(results)], env)
    assert "Traceback" not in r.stderr, r.stderr
    (path,) = results.glob("dying/dies/*/summary.json")
    rows = {row["configuration"]: row for row in json.loads(path.read_text())["controls"]["rows"]}
    row = rows["fieldy"]
    assert row["in_launch"] and row["status"] == "failed", row
    assert row["reason"].startswith("crashed: SIGSEGV (segmentation fault)"), row["reason"]


def test_a_port_taken_between_its_pick_and_the_runtimes_bind_is_picked_again(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Two arms starting at once on one host can be given the same free port: the runtime that
    finds it taken says so in its log ("Address already in use") and is started again on another."""
    import socket

    from suite.definitions import load_definitions
    from suite.launchers import local
    from suite.launchers.base import LaunchSpec

    images = standin_images(tmp_path / "images", {"same": ["--mode", "same"]})
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    definition = load_definitions(images)["same"]
    marker = local.install_prefix(definition) / definition.local.installed_marker  # the stand-in installs nothing
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("stand-in\n")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    picks = iter([busy, local.free_port()])
    monkeypatch.setattr(local, "free_port", lambda: next(picks))
    spec = LaunchSpec(runtime=definition, model_path=tmp_path / "m.gguf", served_name="standin",
                      log_path=tmp_path / "runtime.log", startup_timeout_s=20)
    try:
        with local.LocalLauncher().start(spec) as rt:
            assert not rt.base_url.endswith(f":{busy}") and rt.alive()
    finally:
        taken.close()


def test_compare_of_a_crashed_run_with_a_complete_one_compares_nothing(crashed: dict) -> None:
    """The arm that crashed at start answered nothing: compared with the arm that served, no prompt
    was answered in both, so `compare` exits 3 (nothing measured), its word is "nothing compared",
    and nothing reads as alike."""
    runs = {p.parent.parent.name: p.parent for p in crashed["results"].glob("crashy/*/*/run.json")}
    out = run_suite(["compare", str(runs["segv-start"]), str(runs["same"]), "--results", str(crashed["results"]),
                     "--json"], crashed["env"])
    assert out.returncode == 3, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["word"] == "nothing compared" and data["prompts_compared"] == 0
    assert data["modal_answers_differ"] is None and "Traceback" not in out.stderr
