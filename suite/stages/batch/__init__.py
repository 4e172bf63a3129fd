"""The batch-composition stage: one target prompt alone, then inside concurrent batches of others.

The design of vLLM's online batch-invariance test (tests/v1/determinism) and SGLang's
`test_deterministic` modes. One target prompt (its setting `prompt`, `--batch-prompt`, else
short-open) is sent at the card's seed and sampling in three modes, `trials` trials each:

- `single`: the target alone, one request in flight. Its most common answer is the reference the
  other modes are compared with (a runtime whose answer varies even alone is reported as such).
- `mixed`: the target inside a batch of other prompts of varied lengths (slices of the shipped
  extraction documents, from a few words to a few thousand characters), all sent at once on the
  suite's concurrent client (`AsyncOpenAIClient`); the batch size cycles through its setting
  `sizes` and the target's place in the batch moves from trial to trial.
- `prefix`: the target inside a batch of prompts that share a prefix of varied lengths with it
  (from its first word to the whole prompt and beyond), so the runtime's prefix cache and
  chunked prefill meet the target's own prompt in other requests.

Between trials the runtime's prefix cache is reset where its definition offers an endpoint for it
(`[server] reset_cache_path`, e.g. vLLM's `POST /reset_prefix_cache`); where it offers none the
result says so. Every request (target and the others) is one `batch` request line.

Per mode: distinct answers of the target with n (those that answered), how many equal the
single-mode reference, the first token where an answer departs from the reference and the logprob
gap there (`suite.analysis.repro.divergence`: each answer's own token's logprob, the reference's
top-1/top-2 margin where top logprobs came back, and the largest logprob difference over the
tokens shared before the split), the largest logprob difference of answers with the reference's
very tokens (drift without a changed token), and the mode's output tokens per second.

The package in two halves: the record half, imported here (`result`: its records and verdict;
`settings`: its settings and options; `trials`: the trials' prompts, the comparison with the
reference and the planned requests; `view`: its page section), and the run half, `run`, which
sends the batches and is named by `STAGE` as "suite.stages.batch.run:run", imported only when a
bench runs the stage.

Its settings are its own (`BatchSettings`, per profile in `STAGE.profiles`, per run from the
command line's `--batch-*` options): whether the bench runs it after the gate (`composition`; the
full profile does), the trials per mode, the batch sizes and the target.
"""

from __future__ import annotations

from suite.stages.base import ExportTable, FirstScreen, SectionTemplate, Stage
from suite.stages.batch.result import (
           COLUMNS,
           VERDICTS,
           BatchLine,
           BatchMode,
           BatchResult,
           claims,
           compare_to_reference,
           export_rows,
           from_lines,
           recompute,
           verdict_of,
)
from suite.stages.batch.settings import OPTIONS, PROFILE_KEYS, PROFILES, BatchSettings, _preflight, batch_prompt, settings
from suite.stages.batch.trials import _inputs, other_texts, planned, trial_prompts

# The names other code imports from the package (each defined in the module that imports it here).
# The run half (`run`, `run_batch`, `reset_cache`) is `suite.stages.batch.run`'s, imported from there.
__all__ = ["COLUMNS", "STAGE", "BatchLine", "BatchMode", "BatchResult", "BatchSettings", "batch_prompt", "claims", "compare_to_reference", "export_rows",
           "from_lines", "other_texts", "planned", "recompute", "settings", "trial_prompts", "verdict_of"]

STAGE = Stage(name="batch", result=BatchResult, run="suite.stages.batch.run:run", lines=(BatchLine,), fresh_runtimes=False, in_bench=False,
              summary="the target prompt alone, then inside batches of other prompts and of shared prefixes: "
                      "does its answer depend on its batch",
              planned=planned, inputs=_inputs,
              when=lambda p: settings(p).composition, after="gate",  # the profile's or --batch-composition
              settings=BatchSettings, options=OPTIONS, preflight=_preflight, profiles=PROFILES, profile_keys=PROFILE_KEYS,
              tables=(ExportTable("batch", export_rows, COLUMNS),), exported_requests=("batch",),
              page_title="batch composition", recompute=recompute, claims=claims, verdicts=VERDICTS, from_lines=from_lines,
              first_screen=FirstScreen("suite.stages.batch.screen:part", order=-1),
              section=SectionTemplate("section.html", "suite.stages.batch.view:page", slot="answers", order=0))
