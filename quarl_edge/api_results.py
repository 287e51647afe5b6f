"""What the Python API returns: one dataclass per function's result (quarl_edge.api re-exports
them all: `qe.HilResult`, `qe.BenchRow`, ...). `dataclasses.asdict(result)` is what the CLI's
`--json` prints."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Latency:
    """Cost of one inference measured on the board, in the board's own unit (ns on the host
    board, cycles under simavr, instructions under QEMU): never mixed across units."""
    unit: str
    median: float | None
    p99: float | None
    n: int


@dataclass
class TrainResult:
    run_dir: str
    env: str
    algo: str
    seed: int
    steps: int
    train_seconds: float
    best_greedy_return: float
    info: dict                        # the whole run.json


@dataclass
class ImportResult:
    run_dir: str
    env: str
    algo: str                         # e.g. "sb3-ppo", "onnx", "keras", "tf-agents"
    source: dict                      # kind, file, sha256, version, ...
    fidelity: dict                    # the imported network against the source framework
    info: dict = field(repr=False, default_factory=dict)   # the whole run.json


@dataclass
class QuantizeResult:
    scheme: str
    path: str
    size_bytes: int


@dataclass
class SweepRow:
    mode: str                         # "fp32", "weights+activations", "weights", "activations"
    bits: int
    mean_return: float
    std_return: float
    agreement: float
    ties: float | None = None


@dataclass
class BuildResult:
    board: str
    model: str
    elf: str
    out_dir: str
    memory: dict                      # flash_bytes, ram_bytes, arena_bytes, weights_bytes, the
                                      # board's board_flash_bytes/board_ram_bytes, % of them
    files: dict = field(default_factory=dict)   # other outputs: "bin", "hex" when written
    notes: list = field(default_factory=list)   # e.g. why no .bin was written


@dataclass
class ValidateResult:
    """Each output row whose bits differ from TF Lite Micro's is classed (`classes`: rows per
    class; quarl_edge/measure/compare.py): `reference-undefined` (TFLM's QUANTIZE is undefined
    C++ for that input; the board equals TFLM on the saturated input), `nan-payload` (NaN on
    both sides, other bits), `libm-ulp` (a float output within an ulp, the model having float
    transcendental ops: `libm_ops`) or `mismatch`. Only mismatches fail: `bit_exact` is true
    when there are none. max_abs_diff/max_rel_diff and `outputs` (per output tensor: max abs
    error, RMSE, cosine similarity, top-1 agreement, dequantized) compare a reference-undefined
    row with TFLM's output on the saturated input."""
    board: str
    model: str
    n: int
    bit_exact: bool
    mismatches: int                   # rows of class `mismatch`
    max_abs_diff: float
    max_rel_diff: float
    latency: Latency
    memory: dict
    link: dict = field(default_factory=dict)   # retries, timeouts, bad_frames, resyncs, resets
    out_dir: str = ""
    differing: int = 0                # rows whose bits differ, whatever the class
    classes: dict = field(default_factory=dict)
    libm_ops: list = field(default_factory=list)
    outputs: list = field(default_factory=list)


@dataclass
class HilResult:
    board: str
    model: str
    env: str
    episodes: int
    seeds: list
    returns: list
    mean_return: float
    std_return: float
    host_mean_return: float           # the same model on the host interpreter, same seeds
    host_std_return: float
    micro_mean_return: float | None   # the same model on TF Lite Micro (None: it cannot run it)
    micro_std_return: float | None
    board_equals_reference: bool      # every board return equal to TF Lite Micro's (else to
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
                                               # (quarl_edge/tflite_host.py: or LiteRT)


@dataclass
class BenchRow:
    board: str
    cpu: str
    precision: str
    kernels: str | None = None
    unit: str | None = None
    cost_first: int | None = None
    cost_mean: float | None = None
    cost_min: int | None = None
    cost_max: int | None = None
    n: int | None = None
    clock_hz: int | None = None
    flash_bytes: int | None = None
    ram_bytes: int | None = None
    stack_bytes: int | None = None
    arena_bytes: int | None = None
    error: str | None = None          # why this cell has no figures (e.g. does not fit)
    run: str | None = None            # the run directory, its env and algorithm
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
class StudySummary:
    study: str
    results: str
    rows: int
    status: dict                      # status -> number of rows ("ok", "skipped", "error", ...)
    seconds: float

    @property
    def complete(self) -> bool:
        """Every row finished: ok, skipped, or a board it does not fit (no error rows)."""
        from .study.results import STATUS_DONE   # lazy: it imports the study's planner (2 s)
        return set(self.status) <= set(STATUS_DONE)


@dataclass
class ReportResult:
    markdown: str
    html: str


@dataclass
class BoardInfo:
    id: str
    name: str
    kind: str
    cpu: str
    clock_hz: int
    flash_bytes: int
    ram_bytes: int
    cost_unit: str
    kernels: str
    installed: bool                   # its compiler, emulator and a flash tool are here
    missing: list                     # what is missing, with how to install it
    missing_build: list               # of that, the compiler and emulator
    flasher: list                     # per flash tool: status, program, install command
    flasher_text: str                 # the same in one line ("-" for boards not flashed)
    path: str = ""                    # the board file
