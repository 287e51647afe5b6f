"""Stage 7, study: QuaRL's questions over a grid of (algo, env, seed, scheme) cells.

Running a study (`quarl-edge study`): grid.py is the driver; config.py reads the TOML file,
plan.py makes the groups of work, cells.py does a group's work (training, cells, sweeps, board
cells), pool.py and farm.py run groups on worker processes or on Ray, results.py reads and
writes the results file. analysis.py computes returns, agreement, KL and weight statistics.

The report (`quarl-edge report`): report.py writes it; statistics.py, claims.py, figures.py,
board_section.py and render.py make its numbers, verdicts, figures, board section and
Markdown/HTML."""
