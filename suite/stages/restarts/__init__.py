"""The restarts stage: the same configuration launched K times, a short gate on each launch.

The bench stops the arm's runtime first; then K fresh processes (or containers) of the same
configuration are started one after another (`ctx.launch()`), each answers a short gate (the
stage's `requests` setting: identical requests per gate prompt), and is stopped. Within-launch
stability (each launch's own answers, named by pattern: stable, a cold-start transient, varying)
and across-launch consistency are two verdicts: a runtime can be stable inside a process and
still change its answer from one start to the next. Across launches (suite.analysis.repro):
"consistent" only where every launch gave the same answer sequence, with what that bounds; "NOT
consistent" only where a permutation test over launch labels says the launches' answers differ
beyond chance inside a launch; otherwise "no detectable difference". Beside it the agreement
across launches (pairs of answers from two launches, a jackknife 95% interval over launches from
6 on) and within launches. A launch that fails to start is recorded with its error line and the
stage goes on with the next one.

Compile caches (study 3): each launch's compile/autotune cache folders, those the runtime's
definition declares (`[compile_cache]`: vLLM's Triton, TorchInductor, vLLM, FlashInfer JIT and
CUDA ComputeCache folders), point under one cache root (the Docker launcher mounts it into the
container), with the definition's settings beside them (vLLM's: Triton keeps its autotuning
choices there too, `TRITON_CACHE_AUTOTUNING=1`, recorded; without it a kept cache keeps kernels
but not the configuration autotuning chose). A runtime that declares none gets no cache folders.
`fresh` gives every launch an empty root (a kernel that autotunes by timing chooses anew), `kept`
lets every launch after the first reuse the first's, `both` runs the two passes. Each launch
records how many cache files it found before it started, so "kept" is a count on the page, not
a promise.

The package in two halves: the record half, imported here (`result`: its records, verdicts and
export; `settings`: its settings, options and planned requests; `caches`: the compile caches'
environment and counts; `view`: its page section), and the run half, `run`, which makes the
launches and is named by `STAGE` as "suite.stages.restarts.run:run", imported only when a bench
runs the stage.
"""

from __future__ import annotations

from suite.stages.base import ExportTable, FirstScreen, SectionTemplate, Stage
from suite.stages.gate_models import select_prompts
from suite.stages.lines import AnswerLine
from suite.stages.restarts.caches import cache_counts, cache_env, cache_not_loaded, files_in
from suite.stages.restarts.result import (
           COLUMNS,
           VERDICTS,
           LaunchOutcome,
           RestartPromptResult,
           RestartsResult,
           claims,
           export_rows,
           from_lines,
           rebuild,
           recompute,
           summarise,
)
from suite.stages.restarts.settings import OPTIONS, PROFILE_KEYS, PROFILES, RestartsSettings, planned, settings

# The names other code imports from the package (each defined in the module that imports it here).
__all__ = ["COLUMNS", "STAGE", "LaunchOutcome", "RestartPromptResult", "RestartsResult", "RestartsSettings", "cache_counts", "cache_env", "cache_not_loaded",
           "claims", "export_rows", "files_in", "from_lines", "planned", "rebuild", "recompute", "settings", "summarise"]

STAGE = Stage(name="restarts", result=RestartsResult, run="suite.stages.restarts.run:run", lines=(AnswerLine,), fresh_runtimes=True, in_bench=True,
              summary="K fresh launches of the same configuration, a short gate on each",
              inputs=lambda p: select_prompts(p.gate_prompts),
              planned=planned,
              settings=RestartsSettings, options=OPTIONS, profiles=PROFILES, profile_keys=PROFILE_KEYS,
              tables=(ExportTable("restarts", export_rows, COLUMNS),), exported_requests=("restarts",),
              page_title="restarts", recompute=recompute, claims=claims, verdicts=VERDICTS, from_lines=from_lines, rebuild=rebuild,
              first_screen=FirstScreen("suite.stages.restarts.screen:part", order=1),
              section=SectionTemplate("section.html", "suite.stages.restarts.view:page", slot="causes", order=2))
