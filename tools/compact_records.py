"""Compact finished run records: each run folder's request lines, stage files and summary kept
xz-compressed (`requests.jsonl.xz`, `stages/<name>.json.xz`, `summary.json.xz`) in place of the
plain files, which every reader of the suite takes in either form (suite.records). Runtime logs and
run.json stay plain. The example trees in docs/examples are kept so (a light checkout).

    .venv/bin/python tools/compact_records.py docs/examples/gpu-vllm-results   # every run under it
    .venv/bin/python tools/compact_records.py RESULTS/MODEL/ARM/RUN_ID         # one run
    .venv/bin/python tools/compact_records.py --expand RUN_OR_TREE             # plain again

A run a live process writes is refused; `suite bench --resume` expands a compacted run itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # this checkout's suite, not an installed one

from suite.errors import SuiteError  # noqa: E402
from suite.records import compact_run, expand_run, iter_run_dirs  # noqa: E402


def _runs(where: Path) -> list[Path]:
    """The run folder given, or every run folder of the results tree given."""
    if (where / "run.json").exists():
        return [where]
    runs = iter_run_dirs(where)
    if not runs:
        raise SuiteError(f"{where}: neither a run folder (run.json) nor a results tree holding one")
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("where", type=Path, nargs="+", help="a run folder or a results tree")
    ap.add_argument("--expand", action="store_true", help="write compacted files plain again")
    args = ap.parse_args(argv)
    try:
        for where in args.where:
            before = after = 0
            for run in _runs(where):
                if args.expand:
                    for path in expand_run(run):
                        print(f"expanded {path}")
                    continue
                for path, size, packed in compact_run(run):
                    before, after = before + size, after + packed
            if not args.expand:
                print(f"{where}: {before} bytes compacted to {after}")
    except SuiteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
