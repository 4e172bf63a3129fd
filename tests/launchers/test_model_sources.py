"""A card's model format from a local path: `source = "path:..."`.

The file or folder is used where it is (nothing copied); its checksum is recorded as for a
download (a file's SHA-256, a folder's snapshot hash over every file) in the format's cache
folder, checked against the card's `sha256`, and computed again when a file changes. A missing
path is one line naming the card file and the format, before anything runs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.catalog import (arm_runtime, format_path, hash_snapshot, load_card, prepare_format, prepared_checksum,
                           snapshot_files)
from suite.errors import SuiteError


def write_card(folder: Path, fmt: str, name: str = "local") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\ntitle = "t"\nserved_name = "m"\n{fmt}\n'
                    '[arms.a]\nruntime = "llamacpp"\nformat = "f"\n')
    return path


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_local_gguf_file_is_used_where_it_is(tmp_path: Path) -> None:
    gguf = tmp_path / "weights" / "model.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" + b"\0" * 100)
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    # Relative to the card's folder.
    card = load_card(write_card(tmp_path / "cards", '[formats.f]\nkind = "gguf"\nsource = "path:../weights/model.gguf"\n'))
    assert card.formats["f"].source == f"path:{gguf}"
    assert format_path(card, "f") == gguf
    assert arm_runtime(card, "a").name == "llamacpp"
    assert prepare_format(card, "f") == gguf
    assert prepared_checksum(card, "f") == digest


def test_a_local_folder_is_checksummed_as_a_snapshot(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"w" * 64)
    (ckpt / "sub" / "tokenizer.json").write_text("{}")
    (ckpt / ".cache").mkdir()  # hub metadata and the like: not part of the snapshot
    (ckpt / ".cache" / "x").write_text("ignored")
    card = load_card(write_card(tmp_path / "cards", f'[formats.f]\nkind = "hf"\nsource = "path:{ckpt}"\n'))
    assert prepare_format(card, "f") == ckpt
    first = prepared_checksum(card, "f")
    assert first == hash_snapshot(ckpt, snapshot_files(ckpt)) and len(snapshot_files(ckpt)) == 3
    # Unchanged: not checksummed again (the fingerprint matches); changed: checksummed again.
    (ckpt / "config.json").write_text('{"changed": true}')
    os.utime(ckpt / "config.json", ns=(1, 1))
    prepare_format(card, "f")
    assert prepared_checksum(card, "f") != first


def test_the_cards_checksum_is_checked(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    card = load_card(write_card(tmp_path / "cards", f'[formats.f]\nkind = "gguf"\nsource = "path:{f}"\n'
                                                    f'sha256 = "{"0" * 64}"\n'))
    with pytest.raises(SuiteError, match=r"local.toml: formats.f: .*m.gguf has checksum [0-9a-f]{64}, not the card's 0+$"):
        prepare_format(card, "f")
    assert prepared_checksum(card, "f") is None


def test_a_missing_path_is_one_line_naming_the_card(tmp_path: Path) -> None:
    path = write_card(tmp_path / "cards", '[formats.f]\nkind = "gguf"\nsource = "path:/nonexistent/model.gguf"\n')
    card = load_card(path)
    with pytest.raises(SuiteError) as exc:
        arm_runtime(card, "a")
    assert str(exc.value) == f"{path}: formats.f.source: no file or folder at /nonexistent/model.gguf"


def test_a_gguf_format_needs_a_file(tmp_path: Path) -> None:
    card = load_card(write_card(tmp_path / "cards", f'[formats.f]\nkind = "gguf"\nsource = "path:{tmp_path}"\n'))
    with pytest.raises(SuiteError, match="a gguf format names a file"):
        arm_runtime(card, "a")
    with pytest.raises(SuiteError, match="source must start with pypi:, hf:, path:, derive:, random: or quantize:"):
        load_card(write_card(tmp_path / "c2", '[formats.f]\nkind = "gguf"\nsource = "file:/x"\nfile = "x"\n'))


def test_bench_with_a_missing_path_writes_nothing(tmp_path: Path) -> None:
    path = write_card(tmp_path / "cards", '[formats.f]\nkind = "gguf"\nsource = "path:/nonexistent/model.gguf"\n')
    results = tmp_path / "results"
    env = {**{k: v for k, v in os.environ.items() if k not in ("RESULTS", "MODEL")}, "SUITE_CARDS": str(path.parent)}
    r = subprocess.run([sys.executable, "-m", "suite.cli", "bench", "--model", "local", "--profile", "quick",
                        "--results", str(results)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == [f"error: {path}: formats.f.source: no file or folder at /nonexistent/model.gguf"]
    assert not results.exists()


def test_a_derived_format_checks_its_local_source(tmp_path: Path) -> None:
    path = write_card(tmp_path / "cards", '[formats.g]\nkind = "gguf"\nsource = "path:missing.gguf"\n'
                                          '[formats.f]\nkind = "hf"\nsource = "derive:g"\n')
    with pytest.raises(SuiteError) as exc:
        arm_runtime(load_card(path), "a")
    assert str(exc.value) == f"{path}: formats.g.source: no file or folder at {path.parent / 'missing.gguf'}"
