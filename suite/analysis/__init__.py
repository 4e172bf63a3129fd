"""Analysis: pure functions from recorded answers to figures (no I/O, no runtime).

`repro` (distinct answers, patterns, agreement over launches), `stats` (percentiles, bootstrap,
paired differences, kappa), `scoring` (extraction scores), `jsonextract` (JSON out of answers).
"""
