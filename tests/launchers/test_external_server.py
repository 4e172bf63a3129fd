"""`suite bench --url URL --served-model NAME`: a server the suite did not start.

Against a real llama-server started here on the tiny GGUF: the gate, latency and extraction run
unchanged, restarts are skipped with the reason, the signature records what the server says
about itself with launcher "external" and the URL, and the site shows the run like any other.
Bad input (no server at the URL, a server that is not an OpenAI API, a model the server does not
list) is one line, exit 2, and nothing in the results folder.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from conftest import send_body
from suite.launchers.base import free_port


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RESULTS", "MODEL")}
    return subprocess.run([sys.executable, "-m", "suite.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on a free loopback port for one test; yields the /v1 base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def html_server() -> Iterator[str]:
    """An HTTP server that answers every path with an HTML page (200), as a web site would."""

    class Handler(_Quiet):
        def do_GET(self) -> None:  # noqa: N802
            send_body(self, 200, "text/html; charset=utf-8", b"<!doctype html><html><body>a web page</body></html>")

    yield from _serve(Handler)


def test_unreachable_url_is_one_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    results = tmp_path / "results"
    line = one_error_line(run_cli("bench", "--url", url, "--served-model", "tiny", "--results", str(results)))
    assert line.startswith(f"error: --url {url}: no server answers there")
    assert not results.exists()


def test_url_that_is_not_an_openai_api_is_one_line(html_server, tmp_path):
    results = tmp_path / "results"
    line = one_error_line(run_cli("bench", "--url", html_server, "--results", str(results)))
    assert line == (f"error: --url {html_server}: not an OpenAI-compatible API: GET /v1/models gave HTTP 200 "
                    "with text/html, not a JSON model list")
    assert not results.exists()


def test_url_that_is_not_http_is_one_line(tmp_path):
    line = one_error_line(run_cli("bench", "--url", "localhost:8080", "--results", str(tmp_path / "r")))
    assert "--url 'localhost:8080': give an http:// or https:// address" in line


def test_served_model_the_server_does_not_list_is_one_line(llamacpp_server, tmp_path):
    url = llamacpp_server.base_url + "/v1"
    results = tmp_path / "results"
    line = one_error_line(run_cli("bench", "--url", url, "--served-model", "nope", "--results", str(results)))
    assert line == f"error: --served-model 'nope': not served at {url}; it lists: tiny"
    assert not results.exists()


def test_bench_url_gives_a_full_record_and_a_site_page(llamacpp_server, tmp_path):
    from suite.site.publish import build_site

    url = llamacpp_server.base_url + "/v1"
    results = tmp_path / "results"
    r = run_cli("bench", "--url", url, "--served-model", "tiny", "--profile", "quick", "--results", str(results),
                timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "external" in r.stdout  # the summary names the launcher
    (run_dir,) = (results / "external" / "external").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete", summary.get("reason")
    assert summary["launcher"] == "external" and summary["runtime"] == "llamacpp"
    assert summary["reason"] == "restarts not run: the suite did not start this server"
    for stage in ("gate", "latency", "extraction"):
        assert summary[stage], stage
        assert (run_dir / "stages" / f"{stage}.json").exists()
    assert summary["restarts"] is None
    assert summary["gate"]["prompts"][0]["requests"] == 5
    sig = json.loads((run_dir / "run.json").read_text())["signature"]
    assert sig["launcher"] == "external" and sig["endpoint"] == url
    assert sig["runtime"] == "llamacpp" and sig["model_format"] == "external"
    reports = sig["server_reports"]
    assert [m["id"] for m in reports["/v1/models"]["data"]] == ["tiny"]
    assert reports["/props"]["build_info"] == sig["runtime_version"]
    assert sig["digest"]
    requests = [json.loads(ln) for ln in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert {q["kind"] for q in requests} >= {"gate", "extraction"}
    assert all(q.get("signature_digest") == sig["digest"] for q in requests if "signature_digest" in q)
    assert llamacpp_server.alive(), "the suite must leave a server it did not start running"

    report = build_site(results, tmp_path / "site")
    assert report.runs == 1 and report.complete == 1
    page = (tmp_path / "site" / "models" / "external.html").read_text()
    assert url in page and "the suite did not start this server" in page
    index = (tmp_path / "site" / "index.html").read_text()
    assert "external" in index


def test_external_runtime_stop_and_kill_leave_the_server(llamacpp_server, tmp_path):
    from suite.launchers.external import ExternalRuntime, probe_server

    info = probe_server(llamacpp_server.base_url, None)  # one model listed: it is the default
    assert info.served_model == "tiny" and info.kind == "llamacpp"
    rt = ExternalRuntime(info, tmp_path / "log")
    rt.kill()
    rt.stop()
    assert rt.alive() and llamacpp_server.alive()
    assert ExternalRuntime(probe_server(llamacpp_server.base_url + "/v1/", "tiny"), Path("x")).base_url == \
        llamacpp_server.base_url


# -- --tokenizer: counting the tokens of a server that does not --------------------------------------

@pytest.fixture()
def bare_server() -> Iterator[str]:
    """An OpenAI-compatible server that reports no token ids, no usage, and has no /tokenize."""

    class Handler(_Quiet):
        def _json(self, code: int, data: object) -> None:
            send_body(self, code, "application/json", json.dumps(data).encode())

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path != "/v1/completions":
                self._json(404, {"error": "not found"})
                return
            if not req.get("stream"):
                self._json(200, {"choices": [{"text": "hello world again", "finish_reason": "stop"}]})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for piece in ("hello", " world", " again"):
                self.wfile.write(f"data: {json.dumps({'choices': [{'text': piece}]})}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

    yield from _serve(Handler)


@pytest.fixture()
def tokenizer_dir(tmp_path: Path) -> Path:
    """A small word-level tokenizer.json, made with the tokenizers library itself."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "again": 3, "say": 4}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    folder = tmp_path / "tok"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_bad_tokenizers_are_one_line_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tokenizers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at import
    from suite.errors import SuiteError
    from suite.launchers.external import load_tokenizer

    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage.json").write_text("not json")
    for source, message in ((str(tmp_path / "missing"), "no file or folder there"),
                            (str(tmp_path / "empty"), "the folder has no tokenizer.json"),
                            (str(tmp_path / "garbage.json"), "garbage.json is not a tokenizer the tokenizers library reads"),
                            ("hf:not a repo", "give hf:ORG/REPO or hf:ORG/REPO@REVISION"),
                            ("hf:suite-test/no-such-repo", "HF_HUB_OFFLINE is set and it is not in the Hugging Face "
                             "cache; download it where there is network")):
        with pytest.raises(SuiteError) as exc:
            load_tokenizer(source)
        assert str(exc.value).startswith(f"--tokenizer {source}") and message in str(exc.value)
        assert "\n" not in str(exc.value)


def test_tokenizer_counts_what_the_server_does_not(bare_server: str, tokenizer_dir: Path) -> None:
    from suite.launchers.external import ExternalLauncher, TokenizerClient, load_tokenizer, probe_server

    tok = load_tokenizer(str(tokenizer_dir))
    launcher = ExternalLauncher(probe_server(bare_server, "m"), tok)
    client = launcher.client(bare_server.removesuffix("/v1"), "m")
    assert isinstance(client, TokenizerClient)
    with client:
        assert client.tokenize("hello world") == [1, 2]  # the server has no /tokenize
        plain = client.complete("say hello", max_tokens=8)
        assert (plain.completion_tokens, plain.prompt_tokens) == (3, 2)
        streamed = client.complete("say hello", max_tokens=8, stream=True)
        assert streamed.text == "hello world again" and streamed.completion_tokens == 3

        async def concurrent() -> list:
            async with client.async_client(max_connections=2) as aclient:
                return list(await asyncio.gather(*(aclient.complete_stream("say hello", max_tokens=8)
                                                   for _ in range(2))))

        assert [(c.text, c.completion_tokens, c.prompt_tokens) for c in asyncio.run(concurrent())] == \
            [("hello world again", 3, 2)] * 2
    reports = launcher.reports()
    assert reports["endpoint"] == bare_server
    assert reports["tokenizer"] == f"{tokenizer_dir} (tokenizer.json sha256 {tok.sha256})"
    # Without --tokenizer: the plain client, counts as the server gives them (none here).
    plain_launcher = ExternalLauncher(probe_server(bare_server, "m"))
    with plain_launcher.client(bare_server.removesuffix("/v1"), "m") as c:
        assert not isinstance(c, TokenizerClient) and c.complete("x", max_tokens=8).completion_tokens is None
    assert plain_launcher.reports()["tokenizer"] is None


def test_the_tokenizer_is_in_the_external_signature(bare_server: str, tokenizer_dir: Path, tmp_path: Path) -> None:
    from suite.bench import make_signature, plan_external
    from suite.launchers.external import ExternalRuntime
    from suite.signature import flatten_signature

    plan = plan_external(bare_server, "m", None, None, "quick", tokenizer=str(tokenizer_dir / "tokenizer.json"))
    spec = plan.spec([], tmp_path / "r.log")
    rt = ExternalRuntime(plan.launcher.info, spec.log_path)  # type: ignore[attr-defined]
    sig = make_signature(plan, rt, spec)
    assert sig.launcher == "external" and sig.endpoint == bare_server and sig.command == [] and sig.env == {}
    assert sig.tokenizer is not None and sig.tokenizer.startswith(str(tokenizer_dir / "tokenizer.json"))
    assert sig.runtime == "external" and sig.runtime_pin is None and sig.model_sha256 is None
    assert flatten_signature(sig)["tokenizer"] == sig.tokenizer
    without = make_signature(plan_external(bare_server, "m", None, None, "quick"), rt, spec)
    assert without.tokenizer is None and without.digest != sig.digest
    # the profile's gate cap is part of the configuration (quick caps every gate prompt at 48 tokens)
    assert sig.sampling is not None and sig.sampling["gate_max_tokens"] == 48
    standard = make_signature(plan_external(bare_server, "m", None, None, "standard"), rt, spec)
    assert standard.sampling is not None and standard.sampling["gate_max_tokens"] == 64
    assert standard.digest != without.digest


def test_a_server_the_suite_did_not_start_takes_the_stage_options(bare_server: str) -> None:
    """`suite bench --url` with a stage's options (`--concurrency 1,2`, `--batch-composition`): they
    reach its plan's profile as for a started runtime, not dropped."""
    from suite.bench import plan_external
    from suite.stages import batch, latency

    plan = plan_external(bare_server, "m", None, None, "quick", overrides={"stage_settings": {
        "latency": {"concurrency": [1, 2]}, "batch": {"composition": True}}})
    assert latency.settings(plan.profile).concurrency == [1, 2] and batch.settings(plan.profile).composition
    assert latency.settings(plan.profile).requests == 4  # the quick profile's own value for the rest
    bare = plan_external(bare_server, "m", None, None, "quick")
    assert latency.settings(bare.profile).concurrency == [1] and not batch.settings(bare.profile).composition


def test_tokenizer_bad_input_on_the_command_line(bare_server: str, tmp_path: Path) -> None:
    results = tmp_path / "results"
    line = one_error_line(run_cli("bench", "--url", bare_server, "--tokenizer", str(tmp_path / "nope"),
                                  "--results", str(results)))
    assert line == f"error: --tokenizer {tmp_path / 'nope'}: no file or folder there"
    assert not results.exists()
    line = one_error_line(run_cli("bench", "--tokenizer", str(tmp_path), "--results", str(results)))
    assert line.startswith("error: --tokenizer counts the tokens of a server given with --url")
    assert not results.exists()
