"""The llama.cpp builds: AMX left out, one build shared by both llama.cpp runtimes, a smoke test
that names a crash, the fallback to the portable build, and the feature line in the signature.

The crash itself (llama.cpp's AMX matmul path dying with SIGSEGV on some AMX CPUs) cannot be
produced on demand on a CPU without AMX, so the fallback is driven by a stand-in llama-server that
really dies by SIGSEGV; the real build is checked for AMX instructions by disassembly, which holds
on any CPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suite.definitions import get_definition
from suite.launchers.local import install_prefix, is_installed
from suite.probes import feature_line

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "images" / "llamacpp"

SEGFAULT = "#!/usr/bin/env python3\nimport os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"

# A stand-in llama-server that answers /health and one completion (the scripted half of the
# fallback test: the portable build that works).
SERVES = textwrap.dedent('''\
    #!/usr/bin/env python3
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def reply(self, body):
            data = json.dumps(body).encode()
            self.send_response(200); self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
        def do_GET(self): self.reply({"status": "ok"})
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.reply({"choices": [{"text": " Paris."}]})
    HTTPServer(("127.0.0.1", port), H).serve_forever()
    ''')


def fake_build(builds: Path, config: str, server: str) -> Path:
    key = subprocess.run(["bash", str(LLAMA / "cpu-key.sh")], capture_output=True, text=True, check=True).stdout.strip()
    out = builds / f"llama.cpp-0.0.0-{config}-{key}"
    (out / "bin").mkdir(parents=True)
    (out / "lib").mkdir()
    exe = out / "bin" / "llama-server"
    exe.write_text(server)
    exe.chmod(0o755)
    (out / ".built").write_text(f"llama.cpp from llama-cpp-python 0.0.0 sdist, {config} build (AMX off)\n")
    return out


def run_build(builds: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SUITE_SMOKE_MODEL": str(tmp / "model.gguf"), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(LLAMA / "build-llama-cpp.sh"), "0.0.0", str(builds), "auto"],
                          capture_output=True, text=True, env=env, timeout=120)


def test_a_native_build_that_crashes_is_named_and_replaced_by_the_portable_one(tmp_path: Path) -> None:
    builds = tmp_path / "builds"
    fake_build(builds, "native", SEGFAULT)
    portable = fake_build(builds, "portable", SERVES)
    out = run_build(builds, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == str(portable)
    assert any("failed its smoke test on this CPU: crashed: SIGSEGV (segmentation fault)" in line
               and "after start" in line for line in lines), lines
    assert any(line.startswith("rebuilding in the portable configuration") for line in lines)
    assert any(line.startswith("smoke test: ok") for line in lines)


def test_a_native_build_that_serves_is_kept(tmp_path: Path) -> None:
    builds = tmp_path / "builds"
    native = fake_build(builds, "native", SERVES)
    out = run_build(builds, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == str(native)
    assert "portable" not in out.stdout


def test_when_both_builds_crash_the_install_fails_with_the_cause(tmp_path: Path) -> None:
    builds = tmp_path / "builds"
    fake_build(builds, "native", SEGFAULT)
    fake_build(builds, "portable", SEGFAULT)
    out = run_build(builds, tmp_path)
    assert out.returncode == 1
    assert "the portable build of llama.cpp 0.0.0 failed its smoke test too: crashed: SIGSEGV" in out.stderr


def test_the_feature_line_is_read_from_either_runtimes_log(tmp_path: Path) -> None:
    server_log = tmp_path / "server.log"
    server_log.write_text("main: build info\nsystem_info: n_threads = 2 (n_threads_batch = 2) / 2 | "
                          "CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 | \nmain: ready\n")
    python_log = tmp_path / "python.log"
    python_log.write_text("system_info: CPU : SSE3 = 1 | AVX2 = 1 | REPACK = 1 | \nINFO: Started\n")
    assert feature_line(server_log, get_definition("llamacpp").server.feature_pattern) == \
        "CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1"
    assert feature_line(python_log, get_definition("llamacpp-python").server.feature_pattern) == \
        "CPU : SSE3 = 1 | AVX2 = 1 | REPACK = 1"
    assert feature_line(tmp_path / "missing.log", "system_info: (.*)") is None
    assert feature_line(python_log, None) is None


def test_both_llama_definitions_offer_repacking_off() -> None:
    assert get_definition("llamacpp").control("no-repack").args == ["--no-repack"]
    assert get_definition("llamacpp-python").control("no-repack").env == {"LLAMA_NO_REPACK": "1"}


def test_the_installed_build_has_no_amx_instructions_and_records_its_features(tmp_path: Path) -> None:
    """Holds on any CPU: the libraries the launcher runs contain no AMX tile instruction, so the
    AMX matmul path that crashes cannot be taken; the live server's feature line says no AMX."""
    definition = get_definition("llamacpp")
    if not is_installed(definition):
        pytest.skip("llamacpp is not installed here (run `suite setup`)")
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    libs = sorted((install_prefix(definition) / "lib").glob("libggml-cpu*.so*"))
    assert libs, "no libggml-cpu in the install"
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(libs[0])], capture_output=True,
                          text=True, check=True).stdout
    assert "tdpbssd" not in dump and "tileloadd" not in dump and "ldtilecfg" not in dump
    assert "native" in (install_prefix(definition) / ".installed").read_text() or \
        "portable" in (install_prefix(definition) / ".installed").read_text()


@pytest.mark.live
def test_the_running_server_records_its_feature_line(llamacpp_server, tmp_path: Path) -> None:
    from suite.launchers.local import LocalLauncher

    line = LocalLauncher().features(get_definition("llamacpp"), llamacpp_server)
    assert line is not None and line.startswith("CPU :") and "REPACK" in line
    assert "AMX_INT8 = 1" not in line


@pytest.mark.parametrize("runtime", ["llamacpp", "llamacpp-python"])
def test_repacking_off_serves_and_is_recorded_by_the_runtime(runtime: str, tiny_gguf, tmp_path: Path) -> None:
    """The no-repack control starts both real runtimes; llama-cpp-python's log says it took effect
    and both still answer (the answer may differ: the kernels differ)."""
    from tests.conftest import start_local
    from tests.launchers.test_local_runtimes import seeded_completion

    with start_local(runtime, tiny_gguf, tmp_path, controls=["no-repack"]) as rt:
        text, prompt_tokens = seeded_completion(rt.base_url)
        log = rt.log_path.read_text(errors="replace")
    assert text.strip() and prompt_tokens == 6
    if runtime == "llamacpp-python":
        assert "weight repacking off (LLAMA_NO_REPACK=1)" in log
        assert "system_info: CPU :" in log
    else:
        assert "--no-repack" in rt.command
