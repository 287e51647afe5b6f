"""Stage 7, study: QuaRL's questions over a grid of (algo, env, seed, scheme) cells.

grid.py runs a study TOML file (parallel, resumable, one JSON line per cell), analysis.py
computes returns, agreement, KL and weight statistics, report.py turns results into Markdown
and HTML with figures and a verdict per QuaRL claim."""
