"""Runtime definitions: `images/<name>/runtime.toml`, validated, in a registry.

Adding a runtime that speaks the OpenAI-compatible API needs no Python: a folder with a
`runtime.toml` (this schema), under `images/` or under a folder `SUITE_IMAGES` names (one or more,
separated by `os.pathsep`; they add to the built-in ones, and a name used twice is an error). A
runtime needs only what it uses: a `Dockerfile` where it has a `[docker]` section, an install
recipe where `[local]` has something to install (`images/README.md` lists the fields). Unknown
keys, missing fields and wrong types are errors that name the file and the key.

What only some runtimes report or keep is declared there too, read through the definition: the
Prometheus histograms of its `/metrics` (`[metrics]`), the fields of the `timings` object of its
replies (`[timings]`), the compile/autotune caches it keeps on disk (`[compile_cache]`).

Command templates take the placeholders `{prefix}` (local install folder), `{model_path}`,
`{served_name}`, `{host}`, `{port}`, `{seed}`, `{context_length}`, `{python}` (a Python runtime's
interpreter: suite.launchers.pyenv), `{lora_args}` (expanded into
the `lora_args` template once per adapter, with `{lora_name}` and `{lora_path}`).
"""

from __future__ import annotations

import logging
import os
import re
import string
import tomllib
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from suite.errors import SuiteError
from suite.paths import IMAGES_DIR

log = logging.getLogger(__name__)


M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """A model of a user's file (a runtime definition, a model card): an unknown key is an error, and
    so is a number that is not finite (nan, inf)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _check_regex(pattern: str | None) -> str | None:
    """A Python regular expression (None passes); else a ValueError that names the pattern."""
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {pattern!r} ({exc})") from None
    return pattern


# A path the suite asks the server (GET/POST base_url + path): absolute, printable ASCII, no space.
URL_PATH = r"^/[!-~]*$"
UrlPath = Annotated[str, Field(pattern=URL_PATH)]
Regex = Annotated[str, AfterValidator(_check_regex)]
def _check_file_in_folder(name: str) -> str:
    """A file of a definition's or a card's folder: a relative path that climbs no folder above it."""
    parts = name.split("/")
    if not re.match(r"^[A-Za-z0-9._/-]+$", name) or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError("must name a file inside its folder (letters, digits, '.', '_', '-' and '/', "
                         "no '..', not absolute)")
    return name


# A file of a runtime's folder (its install recipe, its Dockerfile): a name there, no folder above it.
FileInFolder = Annotated[str, AfterValidator(_check_file_in_folder)]
# A number of seconds the suite waits: more than none, at most a day.
Seconds = Annotated[float, Field(gt=0, le=86400)]


class ServerSpec(Strict):
    """How to talk to the started server."""

    ready_path: UrlPath = "/v1/models"  # GET answers 200 once the model is loaded
    version_path: UrlPath | None = None  # GET returns the runtime's version/config
    version_field: str | None = None  # dotted key in that JSON holding the version string
    startup_timeout_s: Seconds = 600.0
    container_port: int = Field(default=8000, ge=1, le=65535)  # port the server listens on inside a container
    # A regular expression over the runtime's log whose first group is the runtime's own feature
    # line (llama.cpp: "CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 | ..."): the CPU
    # kernel paths it chose, recorded in the signature since they change answers.
    feature_pattern: Regex | None = None
    # POST here empties the runtime's prefix cache (vLLM: /reset_prefix_cache, served with
    # VLLM_SERVER_DEV_MODE=1); the batch-composition stage resets it between trials. None: none offered.
    reset_cache_path: UrlPath | None = None


# An environment variable's name, and a value the environment can hold (no NUL byte).
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
EnvName = Annotated[str, Field(pattern=ENV_NAME)]
EnvValue = Annotated[str, Field(pattern=r"^[^\x00]*$")]
Env = dict[EnvName, EnvValue]
# One argument of a command: no NUL byte (exec refuses one).
Arg = Annotated[str, Field(pattern=r"^[^\x00]*$")]


class LocalSpec(Strict):
    """How to install and start the runtime as a local process."""

    # recipe script in the runtime's folder, called as `install PREFIX`; None: nothing to install
    # (the command runs what the machine already has), and `{prefix}` names no folder
    install: FileInFolder | None = None
    installed_marker: FileInFolder = ".installed"
    command: list[Arg] = Field(min_length=1)
    env: Env = Field(default_factory=dict)
    version_command: list[Arg] | None = Field(default=None, min_length=1)  # prints the version (first line kept)
    # prints the runtime's feature line (as `feature_pattern` finds in a log) from the installed
    # libraries, for a runtime that logs it only at trace level (llama-server)
    features_command: list[Arg] | None = Field(default=None, min_length=1)
    # "CARD:FORMAT" of a model the install recipe smoke-tests its build on (its path in
    # $SUITE_SMOKE_MODEL); the recipe decides what a failed smoke test means.
    smoke_model: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]+:[A-Za-z0-9._-]+$")
    # A Python runtime's interpreter, `{python}` in the commands: its own venv (`{prefix}/venv/bin/python`,
    # from the package index or from $SUITE_WHEELHOUSE), or an existing environment named by
    # `<python_env>_PYTHON` and `<python_env>_PYTHONPATH` (suite.launchers.pyenv). None: no such knob.
    python_env: str | None = Field(default=None, pattern=r"^[A-Z][A-Z0-9_]*$")
    # A folder of the runtime's folder that holds the suite's kernel-override plugin for it: put first
    # on the runtime's PYTHONPATH only where a launch's env names `SUITE_KERNEL_OVERRIDE` (a control
    # with `override`), so that the runtime loads it at start-up through its own plugin mechanism.
    plugins: FileInFolder | None = None


class DockerSpec(Strict):
    """How to build and run the runtime's image."""

    dockerfile: FileInFolder = "Dockerfile"
    build_args: Env = Field(default_factory=dict)
    command: list[Arg] = Field(default_factory=list)  # args after the image's entrypoint
    env: Env = Field(default_factory=dict)
    gpu: Literal["required", "optional", "none"] = "optional"
    model_mount: str = "/models"  # where the model cache is mounted in the container
    shm_size: str | None = None


class VersionSpec(Strict):
    """The definition's version knob: how an arm names another release of the runtime.

    A card's arm that sets `version = "X"` gets that release beside the default one: the local
    launcher runs the install recipe with `install_env=X` into its own folder of the runtime
    cache (`runtimes/<name>@X/`), the Docker launcher builds the image with the build arg
    `build_arg` set to `build_arg_value` (`{version}` replaced by X), a tag of its own.
    """

    default: str  # the release the recipe and the image install when an arm names none
    package: str | None = None  # the package whose releases an arm may name (checked before a run)
    install_env: str | None = None  # the local install recipe reads the version from this variable
    build_arg: str | None = None  # the Dockerfile's ARG that takes it
    build_arg_value: str = "{version}"  # its value: e.g. "vllm/vllm-openai:v{version}" for an image tag


# What a version may look like: it names a folder of the runtime cache and an image build arg.
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


class Capabilities(Strict):
    """What the runtime offers per request; the stages adapt to it."""

    per_request_seed: bool = True
    logprobs: Literal["cheap", "expensive", "none"] = "cheap"
    token_ids: bool = False  # returns generated token ids (with request.extra_body)
    chat: bool = True
    json_schema: bool = False  # honours response_format json_schema
    lora: bool = False
    lora_args: list[Arg] = Field(default_factory=list)  # per adapter: {lora_name} {lora_path}
    # How one request picks base or adapter in a server started with adapters: "model" (the
    # request's model field names the adapter), "scale" (a per-request `lora` list of
    # {id, scale}, as llama-server), "process" (the adapter applies to every request).
    lora_select: Literal["model", "scale", "process"] = "model"
    formats: list[str] = Field(default_factory=list)  # model format kinds: gguf, hf, nvfp4, w4a16


# The request fields the suite sets itself, and records: an `extra_body` may not override them
# (a seed or a temperature the records do not state, a stream the reader does not expect).
SUITE_REQUEST_KEYS = frozenset({
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "seed", "temperature", "top_p",
    "logprobs", "top_logprobs", "response_format", "stream", "stream_options", "n", "lora",
})


def _check_extra_body(body: dict[str, object]) -> dict[str, object]:
    """Fields of a request body besides the suite's own: one of the suite's is refused."""
    own = sorted(SUITE_REQUEST_KEYS & set(body))
    if own:
        raise ValueError(f"{own[0]!r} is a request field the suite sets itself and records; extra_body "
                         "holds only the runtime's own fields")
    return body


ExtraBody = Annotated[dict[str, object], AfterValidator(_check_extra_body)]


class RequestSpec(Strict):
    """Extra fields the runtime wants in every request body (token ids, cache flags...)."""

    extra_body: ExtraBody = Field(default_factory=dict)


# A Prometheus metric name (the exposition format's rule).
METRIC_NAME = r"^[A-Za-z_:][A-Za-z0-9_:]*$"
MetricName = Annotated[str, Field(pattern=METRIC_NAME)]


class MetricsSpec(Strict):
    """Prometheus histograms the runtime serves on GET /metrics, one observation per request, by
    quantity: the latency stage scrapes them before and after each level, and their deltas give the
    runtime's own means for exactly that level's requests (vLLM's `vllm:time_to_first_token_seconds`,
    ...). Several names where the runtime renamed one across versions: the first with new
    observations counts. Not a per-token histogram (vLLM's `vllm:inter_token_latency_seconds`
    observes every gap between tokens: another mean, another n). Empty: none the suite reads."""

    ttft: list[MetricName] = Field(default_factory=list)  # time to first token, seconds
    tpot: list[MetricName] = Field(default_factory=list)  # time per output token of a request, seconds
    e2e: list[MetricName] = Field(default_factory=list)  # the request's whole time, seconds

    def by_quantity(self) -> dict[str, list[str]]:
        """The declared histograms, by quantity (ttft, tpot, e2e), in that order."""
        return {q: names for q, names in (("ttft", self.ttft), ("tpot", self.tpot), ("e2e", self.e2e)) if names}

    @property
    def declared(self) -> bool:
        return bool(self.ttft or self.tpot or self.e2e)


class TimingsSpec(Strict):
    """The runtime's own timings of each request, from the `timings` object it adds to a reply
    (llama-server's): the name of its field for each quantity. With `prompt_ms` and `generation_ms`
    the latency stage pairs every request's figures with the suite's (TTFT: the prompt's time; e2e:
    both; TPOT: the generation time over the generated tokens after the first, which is sampled from
    the prompt pass). Empty: the runtime reports none."""

    prompt_ms: str | None = None  # the prompt's processing time, ms (llama-server: prompt_ms)
    generation_ms: str | None = None  # the time generating the tokens, ms (llama-server: predicted_ms)
    generated_tokens: str | None = None  # tokens generated (llama-server: predicted_n)
    cached_tokens: str | None = None  # prompt tokens taken from the runtime's cache (llama-server: cache_n)

    @model_validator(mode="after")
    def _check_pairs(self) -> TimingsSpec:
        if (self.prompt_ms is None) != (self.generation_ms is None):
            raise ValueError("prompt_ms and generation_ms go together (the runtime's TTFT and e2e need both)")
        if self.generated_tokens is not None and self.prompt_ms is None:
            raise ValueError("generated_tokens needs prompt_ms and generation_ms (it divides the generation time)")
        return self

    @property
    def declared(self) -> bool:
        """Whether the runtime reports its own request timings (not only its cached tokens)."""
        return self.prompt_ms is not None and self.generation_ms is not None


class CacheFolder(Strict):
    """One compile/autotune cache the runtime keeps on disk, moved by an environment variable."""

    env: str = Field(pattern=ENV_NAME)  # the variable that points it at a folder
    # Its folder under a launch's cache root (the restarts stage), and its name in that stage's counts.
    folder: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    # Its name in the signature's `compile_cache` and where it is when `env` is unset (`~`: the home
    # folder; `{user}`: the user's name; `{cache_home}`: $XDG_CACHE_HOME of the runtime's env, else
    # ~/.cache). None, both: the signature does not probe it.
    recorded_as: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    default: str | None = None

    @model_validator(mode="after")
    def _check_recorded(self) -> CacheFolder:
        if (self.recorded_as is None) != (self.default is None):
            raise ValueError("recorded_as and default go together (the signature finds the folder by its default)")
        return self


CACHE_DEFAULT_PLACEHOLDERS = ("user", "cache_home")


class KernelLine(Strict):
    """One line of the runtime's log that names a kernel it chose: a regular expression and what
    the signature records for a match (`re`'s expansion template over it, `\\1` its first group;
    None: the first group, or the whole match)."""

    pattern: Regex
    value: str | None = None

    @model_validator(mode="after")
    def _check_template(self) -> KernelLine:
        if self.value is not None:
            import re

            groups = re.compile(self.pattern).groups
            for ref in re.findall(r"\\(\d+)", self.value):
                if int(ref) > groups:
                    raise ValueError(f"value {self.value!r} names group {ref}; the pattern has {groups}")
        return self


KernelPart = Literal["linear", "moe", "attention"]
# The env variable that names the kernel overrides a launch asks of the suite's plugin (comma-separated).
OVERRIDE_ENV = "SUITE_KERNEL_OVERRIDE"
# Joins controls into one row that applies them together (the matrix's combinations of kernel parts).
COMBINE = "+"


class KernelsSpec(Strict):
    """The kernels a runtime chose, as its own log says at start-up (`[kernels]`): for each part
    (the linear layers' GEMM, the MoE experts', attention), the lines that name it. The signature
    records what they found (`kernel_path`): the same arm on another GPU may run other kernels."""

    linear: list[KernelLine] = Field(default_factory=list)
    moe: list[KernelLine] = Field(default_factory=list)
    attention: list[KernelLine] = Field(default_factory=list)

    def parts(self) -> dict[str, list[KernelLine]]:
        return {k: v for k, v in (("linear", self.linear), ("moe", self.moe), ("attention", self.attention)) if v}


class CompileCacheSpec(Strict):
    """The compile and autotune caches the runtime keeps (Triton's kernels, TorchInductor's, ...):
    the signature records each one's state at launch (`recorded_as`), and the restarts stage points
    every one under a launch's own cache root, empty (fresh) or the first launch's (kept), with
    `settings` beside them. Empty: the runtime keeps none."""

    dirs: list[CacheFolder] = Field(default_factory=list)
    # Env set with the folders: what the caches must hold to be worth keeping (Triton's autotuning
    # choices, TRITON_CACHE_AUTOTUNING=1).
    settings: Env = Field(default_factory=dict)
    # Log lines by which the runtime says it found a cache and did not use it (it compiled again):
    # the restarts stage quotes the first such line of each launch, since a kept cache the runtime
    # cannot load keeps nothing. Python regular expressions.
    not_loaded_patterns: list[Regex] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_unique(self) -> CompileCacheSpec:
        for what in ("env", "folder", "recorded_as"):
            values = [getattr(d, what) for d in self.dirs if getattr(d, what) is not None]
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(f"dirs: {what} {twice[0]!r} named twice")
        return self

    def env_under(self, root: Path) -> dict[str, str]:
        """The env that points every cache under `root` (each in its own folder), and the settings."""
        return {d.env: str(root / d.folder) for d in self.dirs} | self.settings


class InLaunch(Strict):
    """How a control is applied to one request inside a launch that runs without it: the
    runtime's cache emptied just before the request (`[server] reset_cache_path`), and/or fields
    added to the request. A control that has such an equivalent is tested inside one launch, in
    pairs of requests with and without it, instead of over launches of its own."""

    reset_cache: bool = False  # POST the server's reset_cache_path before each request with the control
    extra_body: ExtraBody = Field(default_factory=dict)  # fields each request with the control carries
    why: str = ""  # what the per-request form stands for, shown on the page


class Control(Strict):
    """A named set of env and args that changes the runtime's behaviour (a determinism control)."""

    description: str
    env: Env = Field(default_factory=dict)
    args: list[Arg] = Field(default_factory=list)
    extra_body: ExtraBody = Field(default_factory=dict)  # per-request fields
    concurrency: int = Field(default=1, ge=1, le=256)  # gate requests sent at once (the same request by N clients)
    refused_patterns: list[Regex] = Field(default_factory=list)  # log regexes meaning "refused"
    # Its per-request form, where it has one (a control of request fields alone has one of itself):
    # tested inside one launch rather than over launches of its own.
    in_launch: InLaunch | None = None
    # A control of one kernel part (an MoE backend switch): the automatic matrix tries it only where
    # the arm's kernel path names that part (a dense model logs no MoE backend), or where the path
    # is unknown; asked by name, it always runs.
    kernel: KernelPart | None = None
    # ... and only where that part's kernels, as the start-up named them, match this expression (a
    # switch of the W4A16 linear kernels means nothing to an NVFP4 arm's).
    kernel_match: Regex | None = None
    # A kernel override the suite applies at start-up through the runtime's plugin mechanism, where
    # the runtime offers no working switch of its own (`[local] plugins`): its name, set in the
    # launch's `SUITE_KERNEL_OVERRIDE`; the row's own log must then show the part's kernels changed.
    override: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]*$")
    # Where the switch comes from: the runtime's source file (and release) that reads the flag or
    # variable, recorded with the row so that a reader can check it.
    source: str = ""

    def applies_to(self, kernel_path: dict[str, str] | None) -> bool:
        """Whether the automatic matrix tries it on an arm whose start-up named these kernels."""
        if self.kernel is None or kernel_path is None:
            return True
        found = kernel_path.get(self.kernel)
        if not found:
            return False
        return self.kernel_match is None or re.search(self.kernel_match, found) is not None

    def launch_env(self) -> dict[str, str]:
        """Its env at launch, with the override's name where it has one."""
        return {**self.env, **({OVERRIDE_ENV: self.override} if self.override else {})}

    def per_request(self) -> InLaunch | None:
        """The control's per-request form: declared, or, for a control that is request fields only
        (no env, no args, one client), those fields; None: it needs a launch of its own."""
        if self.in_launch is not None:
            return self.in_launch
        if self.extra_body and not self.env and not self.args and self.concurrency == 1:
            return InLaunch(extra_body=dict(self.extra_body), why="a field of each request")
        return None


Platform = Literal["cpu", "gpu"]


def _cpu_only() -> list[Platform]:
    return ["cpu"]


class RuntimeDefinition(Strict):
    """One runtime: how to install, start, and talk to it."""

    name: str
    description: str
    platforms: list[Platform] = Field(default_factory=_cpu_only)
    base: str | None = None  # another definition whose image this one reuses (variants)
    server: ServerSpec = Field(default_factory=ServerSpec)
    local: LocalSpec | None = None
    docker: DockerSpec | None = None
    capabilities: Capabilities = Field(default_factory=Capabilities)
    request: RequestSpec = Field(default_factory=RequestSpec)
    determinism_control: str | None = None  # the control tried first; None: none offered
    controls: dict[str, Control] = Field(default_factory=dict)
    version: VersionSpec | None = None  # how an arm names another release; None: no version knob
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)  # its Prometheus histograms, per request
    timings: TimingsSpec = Field(default_factory=TimingsSpec)  # its `timings` object's fields, per reply
    compile_cache: CompileCacheSpec = Field(default_factory=CompileCacheSpec)  # the caches it compiles into
    kernels: KernelsSpec = Field(default_factory=KernelsSpec)  # its log's lines naming the kernels it chose
    folder: Path = Path(".")  # set by the loader
    # The release an arm pinned (`with_version`); None: the definition's default. Not a TOML key.
    pinned_version: str | None = None

    @model_validator(mode="after")
    def _check_controls(self) -> RuntimeDefinition:
        if self.determinism_control and self.determinism_control not in self.controls:
            raise ValueError(
                f"determinism_control {self.determinism_control!r} is not one of [controls]"
            )
        for name, control in self.controls.items():
            if COMBINE in name:
                raise ValueError(f"controls.{name}: {COMBINE!r} joins controls into a combination row; "
                                 "a control's own name cannot hold it")
            if control.in_launch and control.in_launch.reset_cache and not self.server.reset_cache_path:
                raise ValueError(f"controls.{name}.in_launch: reset_cache = true needs [server] reset_cache_path")
        return self

    def parts(self, name: str) -> list[str]:
        """The controls a row's name applies: one, or those a combination joins with `+`
        (`moe-nvfp4-emulation+linear-nvfp4-emulation`), each checked."""
        names = name.split(COMBINE) if COMBINE in name else [name]
        if len(names) > 1 and ("default" in names or len(set(names)) != len(names) or "" in names):
            raise SuiteError(f"control {name!r}: a combination joins two or more different controls with "
                             f"{COMBINE!r} (not 'default')")
        for n in names:
            self.control(n)
        return names

    def kernel_parts(self, name: str) -> list[str]:
        """The kernel parts a row's controls change (a combination: each part's, in its order)."""
        return [k for n in self.parts(name) if (k := self.control(n).kernel) is not None]

    def control(self, name: str) -> Control:
        if name == "default":
            return self.controls.get("default") or Control(description="the runtime's defaults")
        if COMBINE in name:
            # a combination: what its parts do together (their env and args in order, every request
            # field, the largest concurrency); each part's kernel override is applied at launch, where
            # the plan reads the parts (`parts`), so the joined control names none itself
            each = [self.control(n) for n in self.parts(name)]
            return Control(
                description=" together with ".join(c.description for c in each),
                env={k: v for c in each for k, v in c.env.items()},
                args=[a for c in each for a in c.args],
                extra_body={k: v for c in each for k, v in c.extra_body.items()},
                concurrency=max(c.concurrency for c in each),
                refused_patterns=[r for c in each for r in c.refused_patterns],
                source="; ".join(dict.fromkeys(c.source for c in each if c.source)))
        if name not in self.controls:
            known = ", ".join(["default", *sorted(self.controls)])
            raise SuiteError(f"runtime {self.name!r} has no control {name!r}; known: {known}")
        return self.controls[name]


def version_spec(definition: RuntimeDefinition, images_dir: Path | None = None) -> VersionSpec | None:
    """The definition's version knob, or its base's (a variant reuses its base's image)."""
    seen: set[str] = set()
    current: RuntimeDefinition | None = definition
    while current is not None and current.name not in seen:
        if current.version is not None:
            return current.version
        seen.add(current.name)
        if current.base is None:
            return None
        current = get_definition(current.base, images_dir) if images_dir is not None else base_definition(current)
    return None


def base_definition(definition: RuntimeDefinition) -> RuntimeDefinition:
    """The definition a variant's `base` names: among every definition where the variant is one of
    them (a variant in a folder of `SUITE_IMAGES` may reuse a built-in runtime's image), else
    beside it in its own folder."""
    assert definition.base is not None
    parent = definition.folder.parent.resolve()
    known = any(parent == folder.resolve() for folder in definition_folders())
    return get_definition(definition.base, None if known else definition.folder.parent)


def with_version(definition: RuntimeDefinition, version: str | None) -> RuntimeDefinition:
    """The definition pinned to one release (its own install folder, its own image tag).

    None gives the definition as it is. The default release, named, shares the default install
    and image (see `suite.launchers.local.install_prefix`). A version the definition has no knob
    for, or one that cannot name a folder, is a SuiteError (the caller names the card and the arm).
    """
    if version is None:
        return definition
    if not VERSION_RE.match(version):
        raise SuiteError("not a release name (letters, digits, '.', '_', '+' or '-')")
    spec = version_spec(definition)
    if spec is None:
        raise SuiteError(f"runtime {definition.name!r} has no version knob ([version] in "
                         f"{definition.folder / 'runtime.toml'}): it installs one release only")
    return definition.model_copy(update={"pinned_version": version})


def shown_value(value: object, limit: int = 60) -> str:
    """A value of a user's file as one line names it: its repr (control characters escaped), cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _format_validation_error(path: Path, err: ValidationError) -> str:
    errors = err.errors()
    # A misspelt key shows as an unknown key and a missing one: name the unknown one first.
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    kind = first["type"]
    value = first.get("input")
    if kind == "extra_forbidden":
        return f"{path}: unknown key: {key}"
    if kind == "missing":
        return f"{path}: missing required key: {key}"
    what = first["msg"].lower().removeprefix("value error, ")
    if not first["loc"]:  # a check over the whole file: its message names the keys
        return f"{path}: {what}: {key}"
    return f"{path}: {key} = {shown_value(value)}: {what}"


# How deep a user's file may nest tables and arrays, and the numbers it may hold: no value of a
# definition, a card or a prompt needs more, and the suite's own code walks them recursively.
MAX_DEPTH = 32
MAX_INT = 2**63 - 1
# Characters no string of a user's file may hold: C0 controls but tab and line breaks, DEL, C1
# controls, and the bidirectional overrides and isolates (they reorder what a reader sees).
CONTROL_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def value_problem(value: object, key: str = "", depth: int = 0) -> tuple[str, object, str] | None:
    """The first value of parsed TOML (or JSON) that no file of the suite may hold, as (key, value,
    why), or None: nested deeper than MAX_DEPTH, a number that is not finite or beyond 64 bits, a
    control character in a string or a key."""
    if depth > MAX_DEPTH:
        return key, "...", f"nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{key}.{k}" if key else str(k)
            if isinstance(k, str) and (m := CONTROL_CHARS.search(k)):
                return key or "(top level)", k, f"a key holds a control character (U+{ord(m.group()):04X})"
            if (found := value_problem(v, sub, depth + 1)) is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if (found := value_problem(v, f"{key}.{i}" if key else str(i), depth + 1)) is not None:
                return found
    elif isinstance(value, str):
        if m := CONTROL_CHARS.search(value):
            return key, value, f"holds a control character (U+{ord(m.group()):04X})"
    elif isinstance(value, bool):
        pass
    elif isinstance(value, int):
        if abs(value) > MAX_INT:
            return key, value, "beyond a 64-bit integer"
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return key, value, "not a finite number"
    return None


def load_toml(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise SuiteError(f"{path}: not valid TOML: nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror}") from None
    if (found := value_problem(data)) is not None:
        key, value, why = found
        raise SuiteError(f"{path}: {key} = {shown_value(value)}: {why}")
    return data


def load_validated(path: Path, model: type[M], data: dict | None = None) -> M:
    """A TOML file (or data read from it) validated as `model`; errors name the file, the key and the value."""
    try:
        return model.model_validate(load_toml(path) if data is None else data)
    except ValidationError as exc:
        raise SuiteError(_format_validation_error(path, exc)) from None


def load_definition(path: Path) -> RuntimeDefinition:
    """Load and validate one runtime.toml; errors name the file and the key."""
    data = load_toml(path)
    if "pinned_version" in data:  # set by with_version for an arm, never by the file
        raise SuiteError(f"{path}: unknown key: pinned_version (an arm names a version in its card)")
    if "protocol" in data:  # read by nothing: the client speaks the OpenAI-compatible API to every runtime
        raise SuiteError(f"{path}: unknown key: protocol (the suite speaks the OpenAI-compatible API to "
                         "every runtime; remove the key)")
    data.setdefault("name", path.parent.name)
    definition = load_validated(path, RuntimeDefinition, {**data, "folder": path.parent})
    _check_templates(path, definition)
    if definition.name != path.parent.name:
        raise SuiteError(f"{path}: name {definition.name!r} differs from its folder {path.parent.name!r}")
    return definition


def user_folders(variable: str, builtin: Path) -> list[Path]:
    """The folders an environment variable names (`os.pathsep`-separated, empty parts skipped), in
    its order, without the built-in folder or one named twice; a folder that does not exist is a
    SuiteError naming the variable and the folder."""
    folders: list[Path] = []
    seen = {builtin.resolve()}
    for part in os.environ.get(variable, "").split(os.pathsep):
        if not part.strip():
            continue
        folder = Path(part).expanduser()
        if not folder.is_dir():
            raise SuiteError(f"{variable}: {part!r} is not a folder")
        if folder.resolve() not in seen:
            seen.add(folder.resolve())
            folders.append(folder)
    return folders


def definition_folders() -> list[Path]:
    """Where runtime definitions are read: images/, then each folder `SUITE_IMAGES` names."""
    return [IMAGES_DIR, *user_folders("SUITE_IMAGES", IMAGES_DIR)]


def load_definitions(images_dir: Path | None = None) -> dict[str, RuntimeDefinition]:
    """Every runtime definition (one folder each with a runtime.toml): those under images/ and
    under each folder `SUITE_IMAGES` names, or, with `images_dir`, those under that folder only.
    A name found in two folders is a SuiteError naming both files."""
    roots = [images_dir] if images_dir is not None else definition_folders()
    found: dict[str, RuntimeDefinition] = {}
    for root in roots:
        for toml_path in sorted(root.glob("*/runtime.toml")):
            definition = load_definition(toml_path)
            if definition.name in found:
                first = found[definition.name].folder / "runtime.toml"
                raise SuiteError(f"{toml_path}: runtime {definition.name!r} is already defined by {first}; "
                                 "rename the folder (a definition adds a runtime, it does not replace one)")
            found[definition.name] = definition
    for definition in found.values():
        if definition.base and definition.base not in found:
            raise SuiteError(
                f"{definition.folder / 'runtime.toml'}: base: unknown runtime {definition.base!r}"
            )
    return found


def get_definition(name: str, images_dir: Path | None = None) -> RuntimeDefinition:
    definitions = load_definitions(images_dir)
    if name not in definitions:
        raise SuiteError(f"unknown runtime {name!r}; known: {', '.join(sorted(definitions))}")
    return definitions[name]


COMMAND_PLACEHOLDERS = ("prefix", "model_path", "served_name", "host", "port", "seed", "context_length")
LORA_PLACEHOLDERS = ("lora_name", "lora_path")
# A local command may also name `{python}`: a Python runtime's interpreter (suite.launchers.pyenv).
LOCAL_PLACEHOLDERS = COMMAND_PLACEHOLDERS + ("python",)


def template_problem(part: str, allowed: tuple[str, ...]) -> str | None:
    """Why `part` is not a template of `allowed` placeholders (None when it is one).

    A placeholder is a bare name (`{port}`): not a position (`{0}`), an attribute or index
    (`{port.real}`, `{port[0]}`), a conversion (`{port!r}`) or a format spec (`{port:>5}`)."""
    try:
        fields = list(string.Formatter().parse(part))
    except ValueError as exc:  # a lone brace
        return f"{exc} (write a brace as {{{{ or }}}})"
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if name not in allowed:
            return f"unknown placeholder {shown} (known: {', '.join('{' + a + '}' for a in allowed)})"
        if conversion or spec:
            return f"placeholder {shown}: write it bare, as {{{name}}}"
    return None


def render(template: list[str], values: dict[str, object], lora_args: list[str] | None = None,
           loras: list[tuple[str, str]] | None = None) -> list[str]:
    """Fill a command template; `{lora_args}` expands to lora_args once per adapter."""
    out: list[str] = []
    for part in template:
        if part == "{lora_args}":
            for lora_name, lora_path in loras or []:
                for a in lora_args or []:
                    out.append(_fill(a, {"lora_name": lora_name, "lora_path": lora_path}))
            continue
        out.append(_fill(part, values))
    return out


def _fill(part: str, values: dict[str, object]) -> str:
    problem = template_problem(part, tuple(values))
    if problem is not None:
        raise SuiteError(f"command template {part!r}: {problem}")
    return part.format(**values)


def _check_templates(path: Path, definition: RuntimeDefinition) -> None:
    """Every template of a runtime.toml names only its placeholders; else one line naming the key."""
    checks: list[tuple[str, list[str], tuple[str, ...]]] = []
    if definition.local is not None:
        checks.append(("local.command", definition.local.command, LOCAL_PLACEHOLDERS))
        checks.append(("local.version_command", definition.local.version_command or [], ("prefix", "python")))
        checks.append(("local.features_command", definition.local.features_command or [], ("prefix",)))
    if definition.docker is not None:
        checks.append(("docker.command", definition.docker.command, COMMAND_PLACEHOLDERS))
    checks.append(("capabilities.lora_args", definition.capabilities.lora_args, LORA_PLACEHOLDERS))
    if definition.version is not None:
        checks.append(("version.build_arg_value", [definition.version.build_arg_value], ("version",)))
    for i, cache in enumerate(definition.compile_cache.dirs):
        if cache.default is not None:
            checks.append((f"compile_cache.dirs.{i}.default", [cache.default], CACHE_DEFAULT_PLACEHOLDERS))
    local = definition.local
    if local is not None and local.install is None:  # nothing installed: no install folder to name
        if local.smoke_model is not None:
            raise SuiteError(f"{path}: local.smoke_model: the install recipe runs the smoke test, and "
                             "local.install names none")
        for key, parts in (("local.command", local.command), ("local.version_command", local.version_command or []),
                           ("local.features_command", local.features_command or [])):
            for i, part in enumerate(parts):
                if "{prefix}" in part:
                    raise SuiteError(f"{path}: {key}[{i}]: {part!r}: {{prefix}} is the install folder, and "
                                     "local.install names no recipe that fills it")
    for key, parts, allowed in checks:
        for i, part in enumerate(parts):
            if key.endswith(".command") and part == "{lora_args}":
                continue
            problem = template_problem(part, allowed)
            if problem is not None:
                where = key if key == "version.build_arg_value" or key.startswith("compile_cache.") else f"{key}[{i}]"
                raise SuiteError(f"{path}: {where}: {part!r}: {problem}")
