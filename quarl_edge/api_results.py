"""What the Python API returns: one dataclass per function's result (quarl_edge.api re-exports
them all, with measure/rows.py's HilResult and BenchRow: `qe.HilResult`, `qe.BenchRow`, ...). `dataclasses.asdict(result)` is what the CLI's
`--json` prints."""
from __future__ import annotations

from dataclasses import dataclass, field

# hil's, bench's and the study's board rows are the row schema's (measure/rows.py), with the
# latency summary that validate's result shares
from .measure.rows import Latency


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
class ExportResult:
    """`export`: the library folder and what was exported (its quarl-edge-export.json)."""
    out: str
    name: str
    model: str
    sha256: str                       # first 8 bytes of the .tflite's SHA-256, hex
    env: str
    board: str
    kernels: str
    action_head: str                  # argmax | identity | scale
    obs_size: int
    action_size: int
    recurrent: bool
    arena_bytes: int
    weight_bytes: int
    input: dict                       # the model's input spec: dtype, shape, scale, zero point
    output: dict
    ops: list
    test_vectors: int
    low: list                         # Box bounds (identity, scale)
    high: list
    start: int                        # Discrete start (argmax)
    n_actions: int
    footprint: dict | None            # text, data, bss of the library alone on the board
    command: str = ""


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
class StudySummary:
    study: str
    results: str
    rows: int
    status: dict                      # status -> number of rows ("ok", "skipped", "error", ...)
    seconds: float

    @property
    def complete(self) -> bool:
        """Every row finished: ok, skipped, or a board it does not fit (no error rows)."""
        from .study.results import STATUS_DONE  # lazy: the package would shadow qe.study
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
