"""The CLI follows its ecosystem's conventions, and a record says what ran.

- every usage error (a bad number, a missing argument, an unknown option, command or choice, an
  unknown control, a judge that does not answer) is one line naming the option, exit 2, with
  nothing started and nothing written;
- `suite --version`; choices shown as choices; `--results` on every command that reads results;
- `--json` for `results`, `compare`, `doctor` and the bench's final table, JSON alone on stdout;
- exit codes a CI job can use: `compare` exits 1 when a prompt's modal answers differ, `bench
  --fail-on-variance` exits 1 when a gate prompt gave more than one answer;
- the run record (run.json, summary.json) and the pages carry the command line and every setting
  that differs from the named profile.

The benches here run stand-in runtimes (`tests/standin_runtime.py`, real processes serving the
OpenAI API) from a temporary images folder: one answers the same every time, one differently.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.launchers.test_crash_naming import STANDIN, parse, run_suite, standin_card, standin_images, suite_env

from suite.bench import profile_overrides
from suite.profiles import get_profile


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("cli")
    images = standin_images(tmp / "images", {"same": ["--mode", "same"], "vary": ["--mode", "vary"]})
    cards = standin_card(tmp / "cards", "standins", ["same", "vary"])
    return {"tmp": tmp, "env": suite_env(tmp, images, cards)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def judge_server() -> str:
    """An OpenAI-compatible server listing one model ("standin"): the stand-in runtime itself."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(STANDIN), "--port", str(port), "--mode", "same"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.kill()
        proc.wait(timeout=10)


BAD = [
    # (arguments, a piece of the one line that names the option and the value)
    (["bench", "--restarts", "x"], "--restarts 'x': not a whole number"),
    (["bench", "--restarts", "1"], "--restarts '1': must be 2 or more"),
    (["bench", "--reloads", "-1"], "--reloads '-1': must be 0 or more"),
    (["bench", "--gate-requests", "1"], "--gate-requests '1': must be 2 or more"),
    (["bench", "--profile", "huge"], "--profile 'huge': not one of quick, standard, full"),
    (["bench", "--launcher", "kubernetes"], "--launcher 'kubernetes': not one of auto, local, docker"),
    (["bench", "--restart-caches", "sometimes"], "--restart-caches 'sometimes': not one of fresh, kept, both"),
    (["bench", "--concurrency", "1,x"], "--concurrency '1,x'"),
    (["bench", "--nope"], "No such option: --nope"),
    (["bench", "--site", "--bogus-flag=1"], "No such option: --bogus-flag"),
    (["gate", "--controls", "nope"], "--controls nope: runtime 'same' has no control 'nope'"),
    (["gate", "--controls", "lora"], "--controls lora: runtime 'same' does not serve LoRA adapters"),
    (["bench", "--judge-url", "http://127.0.0.1:{closed}/v1"], "--judge-url http://127.0.0.1:{closed}/v1: no server answers there"),
    (["bench", "--judge-url", "{judge}", "--judge-model", "other"], "--judge-model 'other': not served at"),
    (["compare", "onlyone"], "Missing argument 'RUN_B'"),
    (["nope"], "No such command 'nope'"),
    (["export", "--format", "xml"], "--format 'xml': not one of parquet, csv"),
    (["results", "--results", "{tmp}/nowhere"], "--results {tmp}/nowhere: no such folder"),
    (["site", "--results", "{tmp}/nowhere"], "--results {tmp}/nowhere: no such folder"),
    (["compare", "a", "b", "--results", "{tmp}/nowhere"], "--results {tmp}/nowhere: no such folder"),
    (["export", "--results", "{tmp}/nowhere"], "--results {tmp}/nowhere: no such folder"),
    (["up", "same", "--port", "0"], "--port '0': must be 1 or more"),
    (["study", "sessions", "--sessions", "1"], "--sessions '1': must be 2 or more"),
    # checked before anything starts: no install for an unknown control, no silent exit 0 for an
    # unknown runtime, no judge model ignored, a target prompt checked whatever the stages
    (["bench", "--tag", "nope"], "--tag 'nope': give KEY=VALUE"),
    (["bench", "--stages", "gate,nope"], "--stages nope: not a stage; known: gate, "),
    (["bench", "--batch-sizes", "1,8"], "--batch-sizes '1,8': must be 2 or more"),
    (["results", "--tag", "=x"], "--tag '=x': give KEY=VALUE"),
    (["up", "same", "--controls", "nope"], "--controls nope: runtime 'same' has no control 'nope'"),
    (["setup", "--runtime", "nope"], "--runtime nope: no arm of model 'standins' runs it; its runtimes: same, vary"),
    (["bench", "--judge-model", "other"], "--judge-model 'other': names a model at a judge's address; give that "
                                          "address with --judge-url"),
    (["bench", "--batch-prompt", "nope"], "--batch-prompt 'nope': not a gate prompt; known: "),
    (["bench", "--stages", "gate", "--batch-prompt", "nope"], "--batch-prompt 'nope': not a gate prompt"),
]


@pytest.mark.parametrize("args,expected", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_nothing_started_nothing_written(world: dict, judge_server: str,
                                                                     args: list[str], expected: str) -> None:
    tmp, env = world["tmp"], world["env"]
    case = tmp / f"case-{abs(hash(tuple(args)))}"
    case.mkdir()
    values = {"closed": str(_free_port()), "judge": judge_server, "tmp": str(tmp)}
    args = [a.format(**values) for a in args]
    expected = expected.format(**values)
    extra: list[str] = []
    if args[0] in ("bench", "gate", "up", "setup") or args[:2] == ["study", "sessions"]:
        extra += ["--model", "standins"]
        if args[0] not in ("up", "setup") and "--launcher" not in args:
            extra += ["--launcher", "local"]
    results = case / "results"
    if args[0] in ("bench", "gate") and "--results" not in args:
        extra += ["--results", str(results)]
    r = run_suite([*args, *extra], {**env, "SUITE_CACHE": str(case / "cache"), "SITE_OUT": str(case / "site")},
                  timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""
    # nothing started (no runtime installed or leased) and nothing written
    assert not (case / "cache" / "runtimes").exists() and not (case / "cache" / "leases").exists()
    assert not results.exists() and not (case / "site").exists()


def test_version_and_choices_in_help(world: dict) -> None:
    import suite

    r = run_suite(["--version"], world["env"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(suite.__file__).parents[1])
    assert r.returncode == 0 and r.stdout.startswith(f"suite {suite.__version__} (commit {head.stdout.strip()}")
    env = {**world["env"], "COLUMNS": "250"}
    bench = " ".join(run_suite(["bench", "--help"], env).stdout.split())
    for choices in ("quick|standard|full", "auto|local|docker", "fresh|kept|both"):
        assert choices in bench
    assert "--fail-on-variance" in bench and "--json" in bench and "--results" in bench
    assert "parquet|csv" in run_suite(["export", "--help"], env).stdout
    site = " ".join(run_suite(["site", "--help"], env).stdout.split())
    assert "$SITE_OUT" in site and "emptied and rebuilt" in site and "--results" in site
    for command in (["results"], ["compare"], ["export"], ["gate"], ["site"], ["bench"], ["study", "sessions"]):
        assert "--results" in run_suite([*command, "--help"], env).stdout, command


@pytest.mark.parametrize("columns", ["80", "250"])
def test_help_is_plain_and_whole(world: dict, columns: str) -> None:
    """Plain placeholders (TEXT, INTEGER, PATH, the choices), never `<str>` or `<bool>`; defaults
    and the stages' list whole at any width, never cut with an ellipsis."""
    from suite.stages import ORDER, STAGES

    env = {**world["env"], "COLUMNS": columns}
    for command in (["bench"], ["gate"], ["up"], ["setup"], ["export"], ["site"], ["results"], ["compare"],
                    ["study", "sessions"], ["doctor"]):
        r = run_suite([*command, "--help"], env)
        assert r.returncode == 0, r.stderr
        assert "<str>" not in r.stdout and "<bool>" not in r.stdout and "<int" not in r.stdout, r.stdout
        assert "…" not in r.stdout, r.stdout
    bench = " ".join(run_suite(["bench", "--help"], env).stdout.split())
    assert "--profile quick|standard|full" in bench and "--restarts INTEGER" in bench and "--results PATH" in bench
    assert f"of: {', '.join(STAGES)} (default: {', '.join(ORDER)}," in bench
    assert "[default: standard]" in bench and "--site / --no-site" in bench
    # the command list gives each command's first paragraph whole, never cut with "..."
    top = " ".join(run_suite(["--help"], env).stdout.split())
    assert "models List the model cards of the catalog, with their formats and arms." in top
    assert "compare Do two runs of one model answer alike? Per gate prompt, and the configuration fields that differ." in top


def test_watch_help_lists_the_watchdogs_options(world: dict) -> None:
    r = run_suite(["watch", "--help"], world["env"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: suite watch") and "--pid" in r.stdout and "--spill-gb" in r.stdout


@pytest.fixture(scope="module")
def benched(world: dict) -> dict:
    """`bench --fail-on-variance --json` on both stand-ins, with overrides of the quick profile;
    then `gate --fail-on-variance` on the one that answers alike."""
    env, tmp = world["env"], world["tmp"]
    results = tmp / "results"
    bench = run_suite(["bench", "--model", "standins", "--profile", "quick", "--stages", "gate",
                       "--launcher", "local", "--results", str(results), "--gate-requests", "3",
                       "--restarts", "4", "--reloads", "1", "--fail-on-variance", "--json",
                       "--tag", "driver=575.57", "--tag", "host=lab 2"], env)
    gate = run_suite(["gate", "--model", "standins", "--arms", "same", "--profile", "quick",
                      "--launcher", "local", "--results", str(results), "--fail-on-variance"], env)
    runs = {}
    for p in sorted(results.glob("standins/*/*/summary.json")):
        runs.setdefault(p.parent.parent.name, []).append(p.parent)
    return {"bench": bench, "gate": gate, "results": results, "runs": runs, "env": env, "tmp": tmp}


def test_fail_on_variance_exits_1_and_json_is_alone_on_stdout(benched: dict) -> None:
    bench = benched["bench"]
    assert bench.returncode == 1, bench.stdout + bench.stderr
    rows = json.loads(bench.stdout)  # the JSON alone: every other line went to stderr
    by_arm = {row["arm"]: row for row in rows}
    assert set(by_arm) == {"same", "vary"}
    assert by_arm["vary"]["gate"] == [{"prompt_id": "short-open", "distinct_answers": 3, "answered": 3, "requests": 3}]
    assert by_arm["same"]["gate"][0]["distinct_answers"] == 1
    assert by_arm["same"]["status"] == "complete" and by_arm["same"]["failure"] is None
    assert by_arm["vary"]["overrides"] == {"gate_requests": 3, "reloads.launches": 1, "restarts.launches": 4}
    # for other tools: the tags, the suite's code, the figures (no latency stage ran: none), the claims
    assert by_arm["vary"]["tags"] == {"driver": "575.57", "host": "lab 2"}
    from suite.records import short_id_of

    assert by_arm["vary"]["short_id"] == short_id_of(by_arm["vary"]["run_id"]) and by_arm["vary"]["suite"]["commit"]
    assert {"latency", "j_per_token", "claims"} <= set(by_arm["vary"]) and by_arm["vary"]["latency"] is None
    gate_claim = next(c for c in by_arm["vary"]["claims"] if c["stage"] == "gate")
    assert gate_claim["counts"]["distinct"] == 3 and gate_claim["good"] is False and gate_claim["evidence"]["n"] == 3
    assert "variance: vary/short-open: 3 distinct of 3" in " ".join(bench.stderr.split())
    # the arm whose answers agree passes the same check
    assert benched["gate"].returncode == 0, benched["gate"].stdout + benched["gate"].stderr


def test_the_record_says_what_ran(benched: dict) -> None:
    run_dir = benched["runs"]["vary"][0]
    for name in ("run.json", "summary.json"):
        inv = json.loads((run_dir / name).read_text())["invocation"]
        assert inv["command"] == ["suite", "bench", "--model", "standins", "--profile", "quick", "--stages", "gate",
                                  "--launcher", "local", "--results", str(benched["results"]), "--gate-requests",
                                  "3", "--restarts", "4", "--reloads", "1", "--fail-on-variance", "--json",
                                  "--tag", "driver=575.57", "--tag", "host=lab 2"]
        assert inv["tags"] == {"driver": "575.57", "host": "lab 2"}
        assert inv["overrides"] == {"gate_requests": 3, "reloads.launches": 1, "restarts.launches": 4}
        assert inv["stages"] == ["gate"] and inv["controls"] is None
        # the suite's code beside the signature, never in its digest
        record = json.loads((run_dir / name).read_text())
        from suite.provenance import suite_build

        assert record["suite"] == suite_build().model_dump(mode="json") and record["suite"]["commit"]
        assert record["suite"]["commit"] not in json.dumps(record["signature"])
    # a run of the profile as it is says so: no overrides
    plain = json.loads((benched["runs"]["same"][-1] / "summary.json").read_text())["invocation"]
    assert plain["overrides"] == {} and plain["command"][:2] == ["suite", "gate"]


def test_the_pages_say_what_ran(benched: dict) -> None:
    site = benched["tmp"] / "site"
    r = run_suite(["site", "--results", str(benched["results"]), "--out", str(site)], benched["env"])
    assert r.returncode == 0, r.stderr
    page = parse((site / "models" / "standins.html").read_text())
    line = next(p.text() for p in page.one(id="arm-vary").all("p") if "profile quick" in p.text())
    assert line.endswith("profile quick with gate requests 3 · reloads launches 1 · restarts launches 4 · stages gate")
    same = parse((site / "models" / "standins.html").read_text()).one(id="arm-same")
    # its newest complete run is the gate's: the profile as it is, the stages it was asked
    assert next(p.text() for p in same.all("p") if "profile quick" in p.text()).endswith("profile quick with stages gate")
    run_page = parse(next(site.glob("runs/*-vary.html")).read_text())
    command = run_page.one("code", cls="command").text()
    assert command.startswith("suite bench --model standins --profile quick --stages gate") and "--restarts 4" in command
    # the run's tags and the suite's code that wrote it, beside its signature
    assert run_page.one("td", cls="tags").text() == "driver=575.57 host=lab 2"
    from suite.provenance import suite_build

    assert run_page.one("code", cls="suite-build").text() == suite_build().text()


def test_results_compare_and_doctor_speak_json(benched: dict) -> None:
    env, results = benched["env"], benched["results"]
    r = run_suite(["results", "--results", str(results), "--json"], env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1
    rows = doc["runs"]
    assert len(rows) == 3 and {row["arm"] for row in rows} == {"same", "vary"}
    vary = next(row for row in rows if row["arm"] == "vary")
    assert vary["distinct_answers"] == 3 and vary["overrides"] == {"gate_requests": 3, "reloads.launches": 1, "restarts.launches": 4}
    assert rows == sorted(rows, key=lambda row: row["started_at"], reverse=True)
    assert vary["tags"] == {"driver": "575.57", "host": "lab 2"} and vary["suite"]["commit"]
    assert {"latency", "j_per_token", "claims", "short_id"} <= set(vary)
    assert any(c["stage"] == "gate" and c["prompt"] == "short-open" for c in vary["claims"])
    # filtered by tag: every tag given must match
    tagged = run_suite(["results", "--results", str(results), "--json", "--tag", "driver=575.57"], env)
    tagged_rows = json.loads(tagged.stdout)["runs"]  # the bench's two runs, not the gate's untagged one
    assert sorted(row["arm"] for row in tagged_rows) == ["same", "vary"]
    assert all(row["tags"]["driver"] == "575.57" for row in tagged_rows)
    both = run_suite(["results", "--results", str(results), "--json", "--tag", "driver=575.57", "--tag", "host=lab 1"], env)
    assert json.loads(both.stdout)["runs"] == []
    table = " ".join(run_suite(["results", "--results", str(results), "--tag", "host=lab 2"], env).stdout.split())
    assert "driver=575.57 host=lab 2" in table and "tagged host=lab 2" in table

    same_a, same_b = benched["runs"]["same"]
    (vary_run,) = benched["runs"]["vary"]
    agree = run_suite(["compare", same_a.name, same_b.name, "--results", str(results)], env)
    assert agree.returncode == 0, agree.stdout + agree.stderr
    parted = run_suite(["compare", same_a.name, vary_run.name, "--results", str(results), "--json"], env)
    assert parted.returncode == 1, parted.stdout + parted.stderr
    cmp = json.loads(parted.stdout)
    # the varying run's three answers in three requests tie: it has no modal answer to compare, so
    # the two runs are not shown to answer alike (exit 1), without claiming their modal answers differ
    assert cmp["not_alike"] is True and cmp["no_modal_answer"] is True and cmp["modal_answers_differ"] is False
    assert cmp["prompts"][0]["b_tied"] is True and cmp["prompts"][0]["modal_agree"] is None
    text = run_suite(["compare", str(same_a), str(vary_run)], env)  # folders, without --results
    assert text.returncode == 1 and "no modal answer (tied) on short-open" in " ".join(text.stdout.split())

    doctor = run_suite(["doctor", "--json"], env)
    assert doctor.returncode == 0, doctor.stderr
    checks = {row["check"]: row["state"] for row in json.loads(doctor.stdout)}
    assert "cpu" in checks and "arm standins/same" in checks


def test_profile_overrides_are_the_settings_that_differ() -> None:
    quick = get_profile("quick")
    assert profile_overrides(quick) == {}
    changed = quick.model_copy(update={"gate_requests": 7, "stage_settings": {
        "restarts": {"launches": 6}, "reloads": {"launches": 1}, "controls": {"auto": True}}})
    assert list(profile_overrides(changed).items()) == [("gate_requests", 7), ("reloads.launches", 1),
                                                        ("restarts.launches", 6), ("controls.auto", True)]
    assert profile_overrides(quick.model_copy(update={"name": "custom"})) == {}  # no profile to differ from
