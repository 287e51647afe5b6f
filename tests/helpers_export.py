"""What tests/test_export.py and tests/test_export_boards.py share: exporting through the CLI,
observations to feed a policy, and the host's mapping of TF Lite Micro's outputs to actions (what
`hil` compares a board with)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = ROOT / "examples" / "cartpole_dqn"
RPPO = ROOT / "tests" / "fixtures" / "sb3" / "rppo_cartpole.zip"
PENDULUM_ONNX = ROOT / "tests" / "fixtures" / "onnx-export" / "sac_pendulum_actor.op13.onnx"


def cli(*args, cwd=ROOT):
    p = subprocess.run([sys.executable, "-m", "quarl_edge.cli", *map(str, args)], cwd=cwd,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def export(run, name, out, board="host", scheme="int8"):
    cli("export", run, "--scheme", scheme, "--board", board, "--name", name, "--out", out)
    return json.loads((Path(out) / "quarl-edge-export.json").read_text())


def observations(env_id: str, n: int = 60) -> np.ndarray:
    """Observations of episodes with random actions, and as many drawn around them."""
    from quarl_edge.core.envs import make_gym
    env = make_gym(env_id)
    env.action_space.seed(1)
    obs, _ = env.reset(seed=1)
    seen = []
    for _ in range(n):
        seen.append(np.asarray(obs, np.float32).reshape(-1))
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            obs, _ = env.reset()
    seen = np.stack(seen)
    rng = np.random.default_rng(0)
    spread = rng.normal(0.0, 1.5, seen.shape).astype(np.float32) * (np.abs(seen) + 0.1)
    return np.concatenate([seen, seen + spread]).astype(np.float32)


def host_actions(run: Path, scheme: str | None, obs: np.ndarray,
                 env_id: str | None = None) -> np.ndarray:
    """The host's mapping of TF Lite Micro's outputs: the observation quantized and the output
    dequantized as measure/reference.py does (with tflite-runtime's tensor details), TFLM's
    outputs, then core/envs.outputs_to_actions with the run's head: what hil compares with."""
    from quarl_edge.measure.hil import hil_policy
    from quarl_edge.measure.reference import (_dequantized, _quantized, host_reference,
                                              tflite_runtime_interpreter)
    from quarl_edge.core.envs import outputs_to_actions
    t = hil_policy(run, scheme, env_id, None)
    ref = host_reference(t.model, micro=True)      # a recurrent model: from a zero state
    interp = tflite_runtime_interpreter(t.model)
    din, dout = interp.get_input_details()[0], interp.get_output_details()[0]
    outs = []
    for o in obs:
        x = _quantized(o.reshape(tuple(din["shape"])), din)
        outs.append(_dequantized(ref.run([x])[0], dout).reshape(-1))
    acts = outputs_to_actions(np.stack(outs), t.space, t.action_head)
    return np.asarray(acts, np.float32).reshape(len(obs), -1)




def imported_run(source: Path, env_id: str, out: Path, *schemes: str) -> Path:
    """`source` imported to the run `out` and quantized to `schemes`, in this process: what
    `quarl-edge import` and `quarl-edge quantize` call, without a process per step that imports
    TensorFlow again (those CLIs run in test_import*.py and test_docs_runs.py). The fixtures'
    runs are the input of the export tests, not what they test."""
    from quarl_edge import api
    api.import_policy(source, out=out, env=env_id)
    assert [q.scheme for q in api.quantize(out, schemes)] == list(schemes)
    return out


def pendulum_run(d: Path) -> Path:
    """The SB3 SAC Pendulum actor (ONNX), imported and quantized to int8 in `d`/pendulum."""
    return imported_run(PENDULUM_ONNX, "Pendulum-v1", d / "pendulum", "int8")

