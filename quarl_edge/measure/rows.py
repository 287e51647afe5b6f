"""The row schema: one name per concept for what hil, bench and the study's board cells measure,
shared by their JSON outputs (`--json`, RUN/results, OUT/bench.jsonl, a study's results.jsonl)
and the Python API's result dataclasses; and the migration of older rows to these names.

The words, the same in every row that has the concept:

    scheme               the quantization scheme of the model that ran (RUN/models/<scheme>
                         .tflite; a bare MODEL.tflite's stem)
    returns, mean_return the board's episodes (the board choosing every action)
    tflite_*             the same model on tflite-runtime's default (optimized) kernels, same seeds
    tflite_ref_*         the same on tflite-runtime's reference kernels
    micro_*              the same on TF Lite Micro (None when it cannot run the model)
    fp32_*               the run's fp32 network, same seeds (None for a bare .tflite)
    matches_reference    every board return equal to TF Lite Micro's on the same seed (to
                         tflite-runtime's when TFLM cannot run the model): the reference check
    matches_tflite, matches_tflite_ref    the same check against those interpreters
    agreement            the board's actions against the reference's on the board's states
                         (episodes.agreement), agreement_with naming the reference

Older rows used other names; `migrate` renames them (RENAMED) when a row is read (study
results, bench.jsonl), so files written before stay readable and are never rewritten for it:

    precision               -> scheme              bench rows; study board rows had both
    run                     -> run_dir             bench rows (the run directory)
    model                   -> scheme              hil results
    board_equals_reference  -> matches_reference   hil results
    host_mean_return        -> tflite_mean_return  hil results (tflite-runtime, default kernels)
    host_std_return         -> tflite_std_return

and a board row from before the TF Lite Micro reference (matches_tflite, no matches_reference)
gets matches_reference = matches_tflite: its check was against tflite-runtime.

Adding a measured column: a field here (with its comment: this is its documentation) and the
code that measures it (episodes.py for an episode column, bench.bench_cell for a cost or
memory one, study/cells.py for a study-only one); the report or the CLI only if they show it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# old key -> today's (see the module docstring)
RENAMED = {"precision": "scheme", "model": "scheme", "run": "run_dir",
           "board_equals_reference": "matches_reference",
           "host_mean_return": "tflite_mean_return", "host_std_return": "tflite_std_return"}


def migrate(row: dict) -> dict:
    """`row` with today's keys, in the order it had (RENAMED; the module docstring). A key whose
    new name the row has already (a study board row's "precision" beside its "scheme") is
    dropped; the row itself is not changed."""
    out = {}
    for k, v in row.items():
        new = RENAMED.get(k, k)
        if new != k and new in row:
            continue
        out[new] = v
    if "matches_reference" not in out and "matches_tflite" in out:
        out["matches_reference"] = out["matches_tflite"]
    return out


@dataclass
class Latency:
    """Cost of one inference measured on the board, in the board's own unit (ns on the host
    board, cycles under simavr, instructions under QEMU): never mixed across units."""
    unit: str
    median: float | None
    p99: float | None
    n: int


@dataclass
class HilResult:
    """A HIL run (measure/hil.py): the board's episodes and the same seeds on its references."""
    board: str
    scheme: str
    env: str
    episodes: int
    seeds: list
    returns: list
    mean_return: float
    std_return: float
    tflite_mean_return: float         # the same model on tflite-runtime, same seeds
    tflite_std_return: float
    micro_mean_return: float | None   # the same model on TF Lite Micro (None: it cannot run it)
    micro_std_return: float | None
    matches_reference: bool           # every board return equal to TF Lite Micro's (else to
                                      # tflite-runtime's when TFLM cannot run the model)
    actions_equal_reference: bool     # every action of every episode equal to that reference's
    stateful: bool                    # the model keeps state (an LSTM's): RESET per episode
    fp32_mean_return: float | None    # the fp32 network (TensorFlow), same seeds; None for a
    fp32_std_return: float | None     # bare .tflite (no fp32 network to compare with)
    agreement: float                  # share of board actions equal to the reference's on its
    agreement_with: str               # states: "fp32", or "tflite-runtime" for a bare .tflite
    action_head: str                  # argmax, identity or scale (envs.HEADS)
    latency: Latency
    steps_per_s: float | None
    memory: dict
    link: dict = field(default_factory=dict)   # retries, ..., resets, replayed_episodes
    results: str = ""                 # the JSON file written
    episodes_log: str = ""            # its per-episode log (JSON lines)
    host_interpreter: str = "tflite-runtime"   # the host's TFLite interpreter and its version
                                               # (quarl_edge/core/tflite_host.py: or LiteRT)
    deadline: dict | None = None      # hil --control-hz: every step's cost against the period
                                      # (measure/deadline.py: worst_us, margin_us, verdict, ...)
    energy: dict | None = None        # the estimate per inference (mean step) and per episode
                                      # (measure/energy.py: uj, uj_per_episode, source; or none)
    act: dict | None = None   # `hil --act`: the board acted with the exported library's
                              # NAME_act; steps, how many differ from the host's mapping of TFLM


@dataclass
class BenchRow:
    """A bench row (measure/bench.py): one (board, scheme) cell's cost and memory, and with
    episodes its episode columns (episodes.board_episodes)."""
    board: str
    cpu: str
    scheme: str
    kernels: str | None = None
    unit: str | None = None           # the board's cost unit: ns, cycles or instructions
    cost_first: int | None = None     # the first INFER's cost
    cost_mean: float | None = None    # over BENCH n repeats
    cost_min: int | None = None
    cost_max: int | None = None
    n: int | None = None
    clock_hz: int | None = None
    flash_bytes: int | None = None
    ram_bytes: int | None = None
    stack_bytes: int | None = None
    arena_bytes: int | None = None
    error: str | None = None          # why this cell has no figures (e.g. does not fit)
    deadline: dict | None = None      # bench --control-hz: n single BENCHes against the period
                                      # (measure/deadline.py: worst_us, margin_us, verdict, ...)
    energy: dict | None = None        # the estimate for cost_mean (measure/energy.py: uj,
                                      # supply_v, run_ua_per_mhz, source, basis; or none: why)
    run_dir: str | None = None        # the run directory, its env and algorithm
    env: str | None = None
    algo: str | None = None
    # bench(..., episodes=N): N episodes on the board, seeds 0..N-1 (None without episodes)
    episodes: int | None = None
    seeds: list | None = None
    returns: list | None = None       # the board's return per seed
    mean_return: float | None = None
    std_return: float | None = None
    action_head: str | None = None
    tflite_ref_returns: list | None = None  # the same model on tflite-runtime's reference kernels
    tflite_ref_mean_return: float | None = None
    matches_tflite_ref: bool | None = None  # the board's return equals those on every seed
    tflite_returns: list | None = None  # ... on tflite-runtime's optimized (default) kernels
    tflite_mean_return: float | None = None
    matches_tflite: bool | None = None  # the board's return equals tflite-runtime's on every seed
    micro_returns: list | None = None   # TF Lite Micro's returns, same seeds (None: it cannot run)
    micro_mean_return: float | None = None
    matches_reference: bool | None = None  # ... equals TFLM's (else tflite-runtime's) every seed
    fp32_returns: list | None = None  # the fp32 network, same seeds (None for a bare .tflite)
    fp32_mean_return: float | None = None
    agreement: float | None = None    # board actions equal to the fp32 network's on its states
    agreement_with: str | None = None  # "fp32", or "tflm" / "tflite-runtime" for a bare .tflite


@dataclass
class BoardCellRow(BenchRow):
    """A study's board cell (kind "board" in results.jsonl; study/cells.run_board_cell): a bench
    row of the run's scheme on the board, and what the study adds."""
    kind: str = "board"
    study: str | None = None
    seed: int | None = None           # the training seed of the run
    status: str | None = None         # ok, skipped, does-not-fit, error
    reason: str | None = None         # why it is not ok
    node: str | None = None           # where it ran: the Ray node, host name and process
    host: str | None = None
    pid: int | None = None
    us_per_inference: float | None = None   # measured (host board) or at the board's clock
    us_basis: str | None = None
    model_bytes: int | None = None
    bit_exact: bool | None = None     # measure/validate.py on the calibration observations
    validate: dict | None = None      # its n, inputs, mismatches, classes, max_abs_diff
    seconds: float | None = None
    time: str | None = None           # when the study wrote the row (study/results.py's Writer)
    # does-not-fit: what the build needed and what the board has
    board_flash_bytes: int | None = None
    board_ram_bytes: int | None = None
    needs_flash_bytes: int | None = None
    needs_ram_bytes: int | None = None
    weight_bytes: int | None = None
