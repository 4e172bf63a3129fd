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

`--tokenizer` (a local `tokenizer.json` or a folder holding one, or `hf:org/repo[@revision]`)
gives the suite the model's tokenizer for a server that does not count tokens itself: the
client's `tokenize` falls back to it where the server has no `/tokenize`, and a reply that
carries neither token ids nor a usage count gets its completion tokens (and, for a completion
request, its prompt tokens) counted with it. The signature records it with its checksum.
"""

from __future__ import annotations

import logging
import os
import re
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from suite.client import AsyncOpenAIClient, Completion, OpenAIClient
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.launchers.base import Launcher, LaunchSpec, ModelPath, RunningRuntime

if TYPE_CHECKING:
    from suite.definitions import RuntimeDefinition
    from suite.probes import Hardware, Machine

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


def model_list(http: httpx.Client, option: str, shown: str, key_env: str, who: str = "the server"
               ) -> tuple[Any, list[dict[str, Any]]]:
    """GET /v1/models through `http`: its JSON and its list of models. A server that does not
    answer, refuses the key (named by `key_env`) or is no OpenAI-compatible API is one line naming
    `option` and the address."""
    from suite.secrets import scrub

    try:
        r = http.get("/v1/models")
    except httpx.HTTPError as exc:
        reason = scrub(str(exc).strip()) or type(exc).__name__
        raise SuiteError(f"{option} {shown}: no server answers there ({reason})") from None
    if r.status_code in (401, 403):
        raise SuiteError(f"{option} {shown}: {who} refused GET /v1/models (HTTP {r.status_code}); "
                         f"give its key in {key_env}")
    try:
        data = r.json() if r.status_code == 200 else None
    except ValueError:
        data = None
    listed = data.get("data") if isinstance(data, dict) else None
    if not isinstance(listed, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str)
                                               for m in listed):
        raise SuiteError(f"{option} {shown}: not an OpenAI-compatible API: GET /v1/models gave "
                         f"{_describe_reply(r)}, not a JSON model list")
    return data, listed


def probe_server(url: str, served_model: str | None, timeout_s: float = 10.0) -> ServerInfo:
    """Check that an OpenAI-compatible server answers at `url` and serves `served_model`."""
    root, shown = split_url(url)
    key = os.environ.get(API_KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=root, timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
                      headers=headers, follow_redirects=False) as http:
        data, listed = model_list(http, "--url", shown, API_KEY_ENV)
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


# -- a tokenizer for a server that does not count tokens ------------------------------------------

@dataclass
class LocalTokenizer:
    """A model's tokenizer (the `tokenizers` library's `tokenizer.json`), loaded by the suite."""

    source: str  # as given: a path, or hf:org/repo[@revision]
    path: Path  # the tokenizer.json read
    sha256: str
    commit: str | None = None  # hf: the commit the revision resolved to
    _tok: Any = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        commit = f"commit {self.commit}, " if self.commit else ""
        return f"{self.source} ({commit}tokenizer.json sha256 {self.sha256})"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def count(self, text: str) -> int:
        return len(self.encode(text, add_special_tokens=False))


_HF_TOKENIZER = re.compile(r"^hf:(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")


def load_tokenizer(source: str) -> LocalTokenizer:
    """The tokenizer `--tokenizer` names, loaded and checksummed; a bad one is one SuiteError line.

    A local `tokenizer.json`, a folder holding one (a checkpoint's folder), or `hf:org/repo`
    (optionally `@revision`), whose `tokenizer.json` is downloaded with huggingface_hub into its
    cache (offline: `HF_HUB_OFFLINE=1` uses what is there).
    """
    from suite.hashing import sha256_file

    try:
        import tokenizers
    except ImportError:
        raise SuiteError(f"--tokenizer {source}: needs the `tokenizers` package in the suite's environment "
                         "(pip install tokenizers)") from None
    commit = None
    m = _HF_TOKENIZER.match(source.strip())
    if source.strip().startswith("hf:"):
        if m is None:
            raise SuiteError(f"--tokenizer {source}: give hf:ORG/REPO or hf:ORG/REPO@REVISION")
        path, commit = _download_tokenizer(m["repo"], m["rev"] or "main")
    else:
        given = Path(source).expanduser()
        path = given / "tokenizer.json" if given.is_dir() else given
        if not given.exists():
            raise SuiteError(f"--tokenizer {source}: no file or folder there")
        if not path.is_file():
            raise SuiteError(f"--tokenizer {source}: the folder has no tokenizer.json")
    try:
        tok = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - not a tokenizer.json
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise SuiteError(f"--tokenizer {source}: {path.name} is not a tokenizer the tokenizers library reads "
                         f"({first})") from None
    return LocalTokenizer(source=source.strip(), path=path, sha256=sha256_file(path), commit=commit, _tok=tok)


def _download_tokenizer(repo: str, revision: str) -> tuple[Path, str | None]:
    import huggingface_hub
    from huggingface_hub import errors as hub_errors

    offline_hint = (f"download it where there is network (`hf download {repo} tokenizer.json --revision {revision}`) "
                    "and give its path, or, with it in the Hugging Face cache already, set HF_HUB_OFFLINE=1")
    try:
        path = Path(huggingface_hub.hf_hub_download(repo, "tokenizer.json", revision=revision))
    except (hub_errors.OfflineModeIsEnabled, hub_errors.LocalEntryNotFoundError):
        why = ("HF_HUB_OFFLINE is set and it is not in the Hugging Face cache"
               if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
               else "the hub does not answer")
        raise EnvironmentUnavailable(f"--tokenizer hf:{repo}@{revision}: {why}; {offline_hint}") from None
    except hub_errors.EntryNotFoundError:
        raise SuiteError(f"--tokenizer hf:{repo}@{revision}: the repository has no tokenizer.json") from None
    except (hub_errors.RepositoryNotFoundError, hub_errors.RevisionNotFoundError) as exc:
        raise SuiteError(f"--tokenizer hf:{repo}@{revision}: {type(exc).__name__} (gated? set HF_TOKEN)") from None
    except Exception as exc:  # noqa: BLE001 - offline, a proxy, the hub down
        raise EnvironmentUnavailable(f"--tokenizer hf:{repo}@{revision}: cannot fetch its tokenizer.json "
                                     f"({type(exc).__name__}); {offline_hint}") from None
    # a hub cache path: .../snapshots/<commit>/tokenizer.json
    commit = path.parent.name if re.fullmatch(r"[0-9a-f]{40}", path.parent.name) else None
    return path, commit


class TokenizerClient(OpenAIClient):
    """The client, with the suite's own tokenizer where the server counts no tokens."""

    def __init__(self, *args: Any, tokenizer: LocalTokenizer, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.local_tokenizer = tokenizer
        self._server_tokenizes: bool | None = None  # None: not asked yet

    def tokenize(self, text: str) -> list[int] | None:
        if self._server_tokenizes is not False:
            ids = super().tokenize(text)
            self._server_tokenizes = ids is not None
            if ids is not None:
                return ids
        return self.local_tokenizer.encode(text)

    def _generate(self, path: str, body: dict[str, Any], stream: bool, extra: dict[str, Any] | None,
                  chat: bool) -> Completion:
        out = super()._generate(path, body, stream, extra, chat)
        return count_missing(out, self.local_tokenizer, None if chat else body.get("prompt"))

    def async_client(self, max_connections: int = 256,
                     backend: type[AsyncOpenAIClient] = AsyncOpenAIClient) -> AsyncOpenAIClient:
        """The asyncio twin (latency at concurrency), its streamed replies counted the same way."""
        inner = super().async_client(max_connections, backend)
        tokenizer = self.local_tokenizer
        inner.finish = lambda completion, prompt: count_missing(completion, tokenizer, prompt)
        return inner


def count_missing(c: Completion, tokenizer: LocalTokenizer, prompt: Any = None) -> Completion:
    """A completion with the token counts the server left out, counted by the tokenizer (after
    the request's clock stopped: the counting is no part of its latency)."""
    if c.token_ids is None and c.completion_tokens is None and c.error is None:
        c.completion_tokens = tokenizer.count(c.text)
    if c.prompt_tokens is None and isinstance(prompt, str):
        c.prompt_tokens = len(tokenizer.encode(prompt))
    return c


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
    starts_runtimes = False

    def __init__(self, info: ServerInfo, tokenizer: LocalTokenizer | None = None):
        self.info = info
        self.tokenizer = tokenizer

    def check_available(self) -> None:
        probe_server(self.info.root, self.info.served_model)

    def prepare(self, runtime: Any, model_path: ModelPath | None = None) -> None:
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

    # -- what the signature records ---------------------------------------------------------------
    def version(self, runtime: RuntimeDefinition, rt: RunningRuntime) -> str | None:
        """What the server said about itself when probed."""
        return self.info.version

    def env(self, runtime: RuntimeDefinition, spec: LaunchSpec) -> dict[str, str]:
        """Unknown: the suite did not start it (the spec's env only, which a --url arm leaves empty)."""
        return dict(spec.env)

    def hardware(self) -> Hardware:
        """This machine's, only when the server runs here (a loopback address); else unknown."""
        from suite.probes import Hardware, detect_hardware

        host = urllib.parse.urlsplit(self.info.url).hostname or ""
        if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127."):
            return detect_hardware()
        return Hardware(cpu="unknown (a remote server)", cores=0, memory_gb=0.0, os="unknown")

    def machine(self) -> Machine | None:
        """This machine's, only when the server runs here (a loopback address); else unknown (None)."""
        from suite.probes import detect_machine

        host = urllib.parse.urlsplit(self.info.url).hostname or ""
        if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127."):
            return detect_machine()
        return None

    def reports(self) -> dict[str, Any]:
        return {"endpoint": self.info.url, "server_reports": scrub_report(self.info.reports),
                "tokenizer": self.tokenizer.describe() if self.tokenizer else None}

    def client(self, base_url: str, model: str, **kwargs: Any) -> OpenAIClient:
        if self.tokenizer is None:
            return OpenAIClient(base_url, model, **kwargs)
        return TokenizerClient(base_url, model, tokenizer=self.tokenizer, **kwargs)


def scrub_report(value: Any) -> Any:
    """A server's self-report with secret-looking keys and known secret values removed."""
    from suite.secrets import REDACTED, scrub

    if isinstance(value, dict):
        return {k: (REDACTED if re.search(r"api[_-]?key|password|secret", str(k), re.I) else scrub_report(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_report(v) for v in value]
    return scrub(value) if isinstance(value, str) else value
