"""Secrets never reach a record, a log in the results, or a page.

Planted values of the judge key and token-like env vars go through the real signature, the real
record writer and the real site build on a copy of the golden results tree; none of them may
appear in any file under the results or site folders. A real llama-server started with them in
the suite's environment does not get them. Docker build args carry no URL credentials.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from suite.bench import make_signature, plan_arms
from suite.launchers import docker as docker_launcher
from suite.launchers.base import RunningRuntime
from suite.launchers.local import LocalLauncher
from suite.site.publish import build_site
from suite.records import RunManifest, RunRecord, Summary, load_summary, new_run_id, utcnow
from suite.secrets import REDACTED
from suite.stages.extraction.judge import JUDGE_API_KEY_ENV, public_url

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "results"
PLANTED = {
    JUDGE_API_KEY_ENV: "sk-planted-judge-5f1c2a9e",
    "HF_TOKEN": "hf_planted_token_7d3b9c",
    "MY_SERVICE_SECRET": "planted-service-secret-42ab",
    "DB_PASSWORD": "planted-db-password-91",
    "OPENAI_API_KEY": "sk-planted-openai-77aa",
}
URL_PASSWORD = "planted-url-password-33"


def leaks(*folders: Path) -> list[str]:
    found = []
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                found += [f"{path}: {name}" for name, value in [*PLANTED.items(), ("url", URL_PASSWORD)]
                          if value.encode() in data]
    return found


class FakeRunning(RunningRuntime):
    """The started runtime as the signature sees it (its command line), without a process."""

    def __init__(self, command: list[str], log_path: Path):
        self.base_url = "http://127.0.0.1:9"
        self.command = command
        self.log_path = log_path

    def alive(self) -> bool:
        return False

    def stop(self, timeout_s: float = 15.0) -> None:
        pass

    def kill(self) -> None:
        pass


@pytest.fixture
def planted_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)


def test_planted_secrets_reach_no_record_and_no_page(planted_env, tmp_path: Path):
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    plan = plan_arms("tiny", ["llamacpp"], "local", "quick")[0]
    run_logs = tmp_path / "logs"
    spec = plan.spec([], run_logs / "runtime.log")
    # Secrets given to the runtime on purpose (an arm's env, flags), and inside other values.
    spec.env.update({"HF_TOKEN": PLANTED["HF_TOKEN"], "HF_ENDPOINT": f"https://bot:{URL_PASSWORD}@hub.example/",
                     "EXTRA_OPTS": f"--key {PLANTED['MY_SERVICE_SECRET']}"})
    command = [*LocalLauncher().command_for(spec, 8080), "--api-key", PLANTED[JUDGE_API_KEY_ENV],
               f"--hf-token={PLANTED['HF_TOKEN']}", "--header", f"Authorization: Bearer {PLANTED['OPENAI_API_KEY']}",
               "--db", f"postgres://app:{PLANTED['DB_PASSWORD']}@db/x", "--max-num-batched-tokens", "512"]
    signature = make_signature(plan, FakeRunning(command, spec.log_path), spec)
    assert REDACTED in signature.env["HF_TOKEN"] and REDACTED in " ".join(signature.command)
    assert "512" in signature.command, "only secrets are hidden, not every flag naming tokens"

    manifest = RunManifest(run_id=new_run_id(signature.digest), model="tiny", arm="llamacpp", runtime="llamacpp",
                           launcher="local", profile="quick", started_at=utcnow(), signature=signature)
    record = RunRecord.create(results, manifest)
    record.record_request("judge", judge_endpoint=public_url(f"https://u:{PLANTED[JUDGE_API_KEY_ENV]}@judge.example/v1"),
                          text="verdicts")
    summary = Summary(**manifest.model_dump(exclude={"signature", "schema_version"}), signature=signature,
                      status="complete", finished_at=utcnow())
    load_summary(record.finish(summary))

    site = tmp_path / "site"
    report = build_site(results, site)
    assert report.runs == 7
    assert leaks(results, site) == []


def test_a_local_runtime_does_not_inherit_the_suites_secrets(planted_env, tmp_path: Path, tiny_gguf: Path):
    from tests.conftest import start_local

    with start_local("llamacpp", tiny_gguf, tmp_path) as rt:
        environ = Path(f"/proc/{rt.pid}/environ").read_bytes()
        for name, value in PLANTED.items():
            assert value.encode() not in environ, f"{name} reached the runtime's env"
        assert b"PATH=" in environ  # the rest of the env is passed on
    assert leaks(tmp_path) == []


def test_docker_build_args_carry_no_url_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(docker_launcher, "host_pip_config", lambda: {
        "PIP_INDEX_URL": f"https://user:{URL_PASSWORD}@pypi.example/simple",
        "PIP_EXTRA_INDEX_URL": f"https://{PLANTED['HF_TOKEN']}@extra.example/simple {tmp_path}",
        "PIP_DEFAULT_TIMEOUT": "60"})
    server = docker_launcher._LocalFolderServer()
    args, routes = docker_launcher.pip_build_args(server)
    text = " ".join(args.values())
    assert URL_PASSWORD not in text and PLANTED["HF_TOKEN"] not in text
    assert args["PIP_INDEX_URL"] == "https://pypi.example/simple"
    assert args["PIP_EXTRA_INDEX_URL"].startswith("https://extra.example/simple {route:") and routes
