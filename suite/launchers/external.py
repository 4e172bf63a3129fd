"""The external launcher: a server the suite did not start (`suite bench --url URL`).

It starts nothing: `start` returns an `ExternalRuntime` for the URL, whose `stop` and `kill` do
nothing and whose `alive()` is "the server still answers GET /v1/models", so the gate, latency
and extraction stages run against it unchanged. Stages that restart the runtime (restarts,
controls) are skipped by the bench with the reason `NOT_STARTED`.

`probe_server` checks the URL before anything is written (an address where no server answers, a
server that is not an OpenAI-compatible API, a served model it does not list: one `SuiteError`
line each) and collects what the server says about itself (`/v1/models`, `/version`, `/props`,
vLLM's `/server_info` when offered) for the configuration signature. The key of a server that
wants one comes from `SUITE_API_KEY`; the recorded URL carries no credentials.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from suite.errors import RuntimeStartError, SuiteError
from suite.launchers.base import LaunchSpec, Launcher, RunningRuntime

log = logging.getLogger(__name__)

API_KEY_ENV = "SUITE_API_KEY"
NOT_STARTED = "the suite did not start this server"
# What a server may say about itself, beside /v1/models (each kept when it answers JSON).
REPORT_PATHS = ("/version", "/props", "/server_info")


def split_url(url: str) -> tuple[str, str]:
    """(root URL the client talks to, the URL as recorded: no credentials, no query)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SuiteError(f"--url {url!r}: give an http:// or https:// address, e.g. http://127.0.0.1:8080/v1")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    path = parts.path.rstrip("/").removesuffix("/v1").rstrip("/")
    root = urllib.parse.urlunsplit((parts.scheme, netloc, path, "", ""))
    return root, root + "/v1"


@dataclass
class ServerInfo:
    """What the server at a URL said about itself."""

    url: str  # as recorded (no credentials)
    root: str  # what the client talks to
    served_model: str
    models: list[str]
    kind: str | None  # the runtime it looks like: llamacpp, vllm, or None (unknown)
    version: str | None
    reports: dict[str, Any] = field(default_factory=dict)  # path -> JSON it answered


def _describe_reply(r: httpx.Response) -> str:
    kind = r.headers.get("content-type", "no content type").split(";")[0].strip() or "no content type"
    return f"HTTP {r.status_code} with {kind}"


def probe_server(url: str, served_model: str | None, timeout_s: float = 10.0) -> ServerInfo:
    """Check that an OpenAI-compatible server answers at `url` and serves `served_model`."""
    root, shown = split_url(url)
    key = os.environ.get(API_KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=root, timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
                      headers=headers, follow_redirects=False) as http:
        try:
            r = http.get("/v1/models")
        except httpx.HTTPError as exc:
            reason = str(exc).strip() or type(exc).__name__
            raise SuiteError(f"--url {shown}: no server answers there ({reason})") from None
        if r.status_code in (401, 403):
            raise SuiteError(f"--url {shown}: the server refused GET /v1/models (HTTP {r.status_code}); "
                             f"give its key in {API_KEY_ENV}")
        try:
            data = r.json() if r.status_code == 200 else None
        except ValueError:
            data = None
        listed = data.get("data") if isinstance(data, dict) else None
        if not isinstance(listed, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str)
                                                   for m in listed):
            raise SuiteError(f"--url {shown}: not an OpenAI-compatible API: GET /v1/models gave "
                             f"{_describe_reply(r)}, not a JSON model list")
        models = [m["id"] for m in listed]
        if served_model is None:
            if len(models) != 1:
                raise SuiteError(f"--url {shown} serves {len(models)} models ({', '.join(models) or 'none'}): "
                                 "name one with --served-model")
            served_model = models[0]
        elif served_model not in models:
            raise SuiteError(f"--served-model {served_model!r}: not served at {shown}; it lists: "
                             f"{', '.join(models) or 'no model'}")
        reports: dict[str, Any] = {"/v1/models": data}
        for path in REPORT_PATHS:
            try:
                rr = http.get(path)
                if rr.status_code == 200:
                    reports[path] = rr.json()
            except (httpx.HTTPError, ValueError):
                continue
    kind, version = _identify(reports, listed)
    return ServerInfo(url=shown, root=root, served_model=served_model, models=models, kind=kind, version=version,
                      reports=reports)


def _identify(reports: dict[str, Any], listed: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """Which runtime the server looks like, and its version, from what it said."""
    props = reports.get("/props")
    if isinstance(props, dict) and ("build_info" in props or "default_generation_settings" in props):
        return "llamacpp", str(props.get("build_info")) if props.get("build_info") else None
    version = reports.get("/version")
    if "/server_info" in reports or any(m.get("owned_by") == "vllm" for m in listed):
        return "vllm", str(version.get("version")) if isinstance(version, dict) and version.get("version") else None
    if isinstance(version, dict) and version.get("version"):
        return None, str(version["version"])
    return None, None


class ExternalRuntime(RunningRuntime):
    """A server someone else started: never stopped or killed by the suite."""

    def __init__(self, info: ServerInfo, log_path: Path):
        self.info = info
        self.base_url = info.root
        self.command = []
        self.log_path = log_path
        self.startup_s = 0.0
        self.api_key = os.environ.get(API_KEY_ENV)

    def alive(self) -> bool:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            return httpx.get(self.base_url + "/v1/models", timeout=5.0, headers=headers).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, timeout_s: float = 15.0) -> None:
        """Nothing to stop: the suite did not start this server."""

    def kill(self) -> None:
        """Nothing to kill: a watchdog trip is recorded, the server is left alone."""


class ExternalLauncher(Launcher):
    """Starts nothing; `start` hands back the server at the URL, probed again."""

    name = "external"

    def __init__(self, info: ServerInfo):
        self.info = info

    def check_available(self) -> None:
        probe_server(self.info.root, self.info.served_model)

    def prepare(self, runtime: Any) -> None:
        """Nothing to install."""

    def start(self, spec: LaunchSpec) -> ExternalRuntime:
        t0 = time.monotonic()
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        spec.log_path.write_text(f"external server at {self.info.url} ({self.info.kind or 'unknown runtime'}, "
                                 f"version {self.info.version or 'not reported'}): {NOT_STARTED}; its own log "
                                 "is wherever it was started\n")
        rt = ExternalRuntime(self.info, spec.log_path)
        if not rt.alive():
            raise RuntimeStartError(f"the server at {self.info.url} no longer answers",
                                    error_line="no answer on GET /v1/models", log_path=str(spec.log_path))
        rt.startup_s = round(time.monotonic() - t0, 3)
        return rt
