"""The three embedded runtimes start for real on the tiny model and answer a seeded completion;
a runtime that fails to start surfaces its error line and leaves no process behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from suite.client import ClientError, GenerationParams, OpenAIClient
from suite.errors import RuntimeStartError
from suite.paths import tools_prefix
from tests.conftest import start_local

PROMPT = "The capital of France is"


def sensible(text: str) -> bool:
    """Gemma without its BOS token loops ("France of France of France"); with it, it does not."""
    return "of France of France" not in text and sum(c.isalpha() for c in text) > 10


def seeded_completion(base_url: str) -> tuple[str, int | None]:
    with OpenAIClient(base_url, "tiny") as client:
        first = client.complete(PROMPT, max_tokens=16)
        second = client.complete(PROMPT, max_tokens=16)
    assert first.text.strip(), "empty answer"
    assert first.finish_reason in ("length", "stop")
    assert first.prompt_tokens is not None
    return first.text, second.prompt_tokens


def test_llamacpp_seeded_completion(llamacpp_server):
    text, prompt_tokens = seeded_completion(llamacpp_server.base_url)
    assert sensible(text)
    assert prompt_tokens == 6


def test_llamacpp_python_seeded_completion(tiny_gguf, tmp_path):
    with start_local("llamacpp-python", tiny_gguf, tmp_path) as rt:
        text, prompt_tokens = seeded_completion(rt.base_url)
    assert sensible(text)
    assert prompt_tokens == 6


@pytest.mark.vllm
def test_vllm_cpu_seeded_completion_and_same_tokens_as_gguf(tiny_hf, tmp_path, llamacpp_server):
    # Eager mode: no graph compilation, so the start-up costs a minute less on two cores.
    with start_local("vllm-cpu", tiny_hf, tmp_path, controls=["eager"]) as rt:
        with OpenAIClient(rt.base_url, "tiny", params=GenerationParams(extra_body={"return_token_ids": True})) as client:
            answer = client.complete(PROMPT, max_tokens=16)
            vllm_ids = client.tokenize(PROMPT)
    assert sensible(answer.text)
    with OpenAIClient(llamacpp_server.base_url, "tiny") as client:
        gguf_ids = client.tokenize(PROMPT)
    assert answer.prompt_tokens == 6
    assert vllm_ids == gguf_ids, f"vLLM {vllm_ids} vs llama.cpp {gguf_ids}"


def test_gguf_and_derived_checkpoint_tokenise_alike(tiny_hf, llamacpp_server):
    """The derived HF tokenizer (what vLLM loads) and the GGUF's give the same ids, BOS included."""
    prompts = [PROMPT, "Résumé: 3 × 4 = 12 km/h — naïve café.\n\tTabs and  spaces.", "<b>html</b> & ünïcödé 🙂"]
    code = ("import json,sys; from transformers import AutoTokenizer; "
            f"t=AutoTokenizer.from_pretrained({str(tiny_hf)!r}); "
            "print(json.dumps([t(p)['input_ids'] for p in json.load(sys.stdin)]))")
    out = subprocess.run([str(tools_prefix() / "venv/bin/python"), "-c", code], input=json.dumps(prompts),
                         capture_output=True, text=True, timeout=300, check=True)
    hf_ids = json.loads(out.stdout)
    with OpenAIClient(llamacpp_server.base_url, "tiny") as client:
        gguf_ids = [client.tokenize(p) for p in prompts]
    assert hf_ids[0][0] == 2, "the derived tokenizer must add BOS"
    assert [len(x) for x in hf_ids] == [len(x) for x in gguf_ids]
    assert hf_ids == gguf_ids


def no_process_left(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    return proc.status() == psutil.STATUS_ZOMBIE


def test_failed_start_reports_error_line_and_leaves_nothing(tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    before = {p.pid for p in psutil.process_iter()}
    with pytest.raises(RuntimeStartError) as err:
        start_local("llamacpp", missing, tmp_path)
    assert err.value.error_line, "the error line from the runtime's log is reported"
    assert "exited with status" in str(err.value)
    assert err.value.refused is False  # a crash is a failure, not a refusal: no refusal pattern matched
    assert Path(err.value.log_path).exists()
    new = [p for p in psutil.process_iter(["cmdline"]) if p.pid not in before
           and str(missing) in " ".join(p.info["cmdline"] or [])]
    assert not new, f"processes left behind: {new}"


def test_a_start_whose_log_matches_a_refusal_pattern_is_a_refusal(tmp_path):
    """The same failed start, with a pattern that matches llama-server's own line for it."""
    missing = tmp_path / "no-such-model.gguf"
    with pytest.raises(RuntimeStartError) as err:
        start_local("llamacpp", missing, tmp_path, refused_patterns=["failed to load model|error loading model"])
    assert err.value.refused is True
    assert "load" in (err.value.error_line or "")


def test_stop_leaves_no_process(tiny_gguf, tmp_path):
    rt = start_local("llamacpp", tiny_gguf, tmp_path)
    pid = rt.pid
    children = psutil.Process(pid).children(recursive=True)
    rt.stop()
    rt.stop()  # idempotent
    assert no_process_left(pid)
    assert all(no_process_left(c.pid) for c in children)
    with pytest.raises(ClientError):
        OpenAIClient(rt.base_url, "tiny", timeout_s=2).complete(PROMPT, max_tokens=2)


@pytest.mark.parametrize("delay_s", [1.2, 6.0])
def test_ctrl_c_leaves_no_process(tiny_gguf, tmp_path, delay_s):
    """`suite up` interrupted during start-up or while serving stops its runtime."""
    import os
    import signal
    import sys
    import time

    from tests.conftest import installed_definition

    installed_definition("llamacpp")
    proc = subprocess.Popen([sys.executable, "-m", "suite.cli", "up", "llamacpp", "--model", "tiny"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "SUITE_CACHE": os.environ.get("SUITE_CACHE", "")} if os.environ.get("SUITE_CACHE") else None)
    time.sleep(delay_s)
    servers = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    # 130: the suite caught Ctrl-C and stopped its runtime; -2: Ctrl-C came before it started one.
    assert proc.returncode in (130, -signal.SIGINT), out
    assert "Traceback" not in out
    time.sleep(0.5)
    assert all(no_process_left(pid) for pid in servers), out
