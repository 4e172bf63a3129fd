"""The bench: a `BenchRequest` (suite.bench.request) run for every arm of a model.

Modules, by their job: `request` (what a bench is asked, typed and checked once), `plan` (an arm
resolved against the catalog and a launcher), `startup` (`prepare`: the start-up both drivers
share), `launch` (a runtime started in its determinism mode, its watchdog), `session` (one arm's
run, `BenchSession`), `provenance` (its signature, settings and resumes), `failures` (how a
runtime failed), `runner` (the per-arm runner both drivers use, and the local driver `run_bench`;
the Ray driver is `suite.distributed`). This package hands on the names other modules use.
"""

from suite.bench.failures import RuntimeDied, WatchdogTripped, failure_at_start, failure_in_stage
from suite.bench.launch import runtime_pids, start_with_determinism
from suite.bench.plan import ArmPlan, plan, plan_arms, plan_arms_profile, plan_external
from suite.bench.provenance import carried_parts, configuration_differences, flat_settings, invocation_of, make_signature, parallel_fields, profile_overrides
from suite.bench.request import BenchRequest
from suite.bench.runner import bench_arm, controls_of, run_arm, run_bench
from suite.bench.session import BenchSession
from suite.bench.startup import Prepared, check_controls, preflight, prepare
from suite.stages.extraction.judge import JudgeChoice, probe_judge, resolve_judge

__all__ = ["ArmPlan", "BenchRequest", "BenchSession", "JudgeChoice", "Prepared", "RuntimeDied", "WatchdogTripped",
           "bench_arm", "carried_parts", "check_controls", "configuration_differences", "controls_of",
           "failure_at_start", "failure_in_stage", "flat_settings", "invocation_of", "make_signature",
           "parallel_fields", "plan", "plan_arms", "plan_arms_profile", "plan_external", "preflight", "prepare",
           "probe_judge", "profile_overrides", "resolve_judge", "run_arm", "run_bench", "runtime_pids",
           "start_with_determinism"]
