"""The scripts that carry vLLM and its wheels to an offline GPU machine in parts
(benchmarks/gpu/split_parts.sh, install-vllm-parts.sh), run for real on small stand-in parts: an
archive that fits one part, a torn part, a swapped wheel, a relative parts folder."""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benchmarks" / "gpu"


def _wheel(folder: Path, name: str = "standin_pkg") -> Path:
    """A real, minimal wheel pip installs."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-1.0-py3-none-any.whl"
    dist = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": "VERSION = '1.0'\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, text in files.items():
            z.writestr(n, text)
        z.writestr(f"{dist}/RECORD", record)
    return path


def _archive(size: int) -> bytes:
    """An xz tar holding `vllm/__init__.py` and `size` bytes of noise (not compressible)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("vllm/__init__.py", b"__version__ = '0.24.0'\n"), ("vllm/blob", os.urandom(size))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return lzma.compress(buf.getvalue(), preset=0)


def _parts(folder: Path, archive: bytes, pieces: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vllm.sha256").write_text(f"{hashlib.sha256(archive).hexdigest()}  vllm.tar.xz\n")
    step = -(-len(archive) // pieces)
    for i in range(pieces):
        (folder / f"vllm.tar.xz.part-a{chr(ord('a') + i)}").write_bytes(archive[i * step:(i + 1) * step])


def _sums(folder: Path) -> None:
    wheels = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.whl"))
    (folder / "wheels.sha256").write_text("".join(
        f"{hashlib.sha256((folder / w).read_bytes()).hexdigest()}  {w}\n" for w in wheels))


def _install(parts: str, target: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(GPU / "install-vllm-parts.sh"), parts, str(target)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_a_swapped_wheel_or_a_torn_part_installs_nothing_and_leaves_no_archive(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    _wheel(parts / "deps")
    _parts(parts, _archive(4096), 3)
    _sums(parts)
    # a wheel swapped after the checksums were made
    other = _wheel(tmp_path / "other", "standin_pkg")
    with zipfile.ZipFile(other, "a") as z:
        z.writestr("standin_pkg/extra.py", "X = 1\n")
    shutil.copy(other, parts / "deps" / other.name)
    target = tmp_path / "site" / "target"
    r = _install("parts", target, tmp_path)  # a relative parts folder
    assert r.returncode == 3 and "does not match wheels.sha256" in r.stdout, r.stdout + r.stderr
    assert not target.exists() or not any(target.iterdir())
    # the wheel put back, a part torn: nothing installed, no archive left beside the target
    _wheel(parts / "deps")
    (parts / "vllm.tar.xz.part-ab").write_bytes((parts / "vllm.tar.xz.part-ab").read_bytes()[:-10])
    r = _install("parts", target, tmp_path)
    assert r.returncode == 3 and "checksum mismatch" in r.stdout, r.stdout + r.stderr
    assert not any(target.iterdir()), list(target.iterdir())
    assert not list(target.parent.glob("*.tar.xz")) and not list(target.parent.glob(".vllm-parts.*"))


def test_the_parts_are_checked_from_any_folder_and_a_relative_one_passes_its_checksums(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    _wheel(parts / "deps")
    _parts(parts, _archive(4096), 2)
    _sums(parts)
    work = tmp_path / "elsewhere"
    work.mkdir()
    r = _install("../parts", tmp_path / "t" / "target", work)
    # the checksums pass (no false mismatch); the archive unpacks; only the machine's torch is missing here
    assert "mismatch" not in r.stdout and "does not match" not in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "t" / "target" / "vllm" / "__init__.py").is_file()
    assert (tmp_path / "t" / "target" / "standin_pkg" / "__init__.py").is_file()
    assert not list((tmp_path / "t").glob(".vllm-parts.*"))


def _repo(tmp_path: Path) -> Path:
    """A checkout holding split_parts.sh alone (the script measures the checkout it is in)."""
    repo = tmp_path / "repo"
    (repo / "benchmarks" / "gpu").mkdir(parents=True)
    shutil.copy(GPU / "split_parts.sh", repo / "benchmarks" / "gpu" / "split_parts.sh")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "s"], cwd=repo, check=True)
    return repo


def test_split_parts_makes_one_part_of_an_archive_that_fits_and_cleans_up_a_torn_one(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    v = repo / ".gpu" / "vllm"
    _wheel(v / "deps")
    archive = _archive(2048)
    _parts(v, archive, 3)
    before = set(Path("/tmp").glob("split-parts.*"))
    r = subprocess.run(["bash", "benchmarks/gpu/split_parts.sh", "vllm"], cwd=repo, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.name for p in v.glob("vllm.tar.xz.part-*")) == ["vllm.tar.xz.part-aa"]
    assert (v / "vllm.tar.xz.part-aa").read_bytes() == archive
    # a torn part: one line, exit 3, the parts as they were, no temporary archive left
    (v / "vllm.tar.xz.part-aa").write_bytes(archive[:-5])
    r = subprocess.run(["bash", "benchmarks/gpu/split_parts.sh", "vllm"], cwd=repo, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 3 and "the parts do not make vllm.tar.xz" in r.stdout, r.stdout + r.stderr
    assert (v / "vllm.tar.xz.part-aa").read_bytes() == archive[:-5]
    assert set(Path("/tmp").glob("split-parts.*")) == before
