"""The figures of a recurrent run (issue 12): the fp32 greedy return on the test seeds 0..19
(numpy, the state reset per episode), the fp32 and int8 one-step models stepped on
tflite-runtime and TF Lite Micro (reset per episode), and HIL of fp32 on QEMU mps2-an386
(20 episodes). Writes RUN/figures.json; results/recurrent/ holds its output for the shipped run.

    quarl-edge train --env QuarlEdge/CartPoleNoVel-v0 --algo ppo --net lstm --out runs/novel
    python benchmarks/recurrent.py runs/novel [eval] [int8] [hil]
    quarl-edge bench runs/novel --boards mps2-an386 -n 50
"""
import sys, json, time
from pathlib import Path
import numpy as np
from quarl_edge.rl.recurrent import RecurrentLayers, play_recurrent, WEIGHTS_FILE
from quarl_edge import pipeline
from quarl_edge.core.run import Run
from quarl_edge.measure.episodes import play
from quarl_edge.measure.reference import TFLiteRuntime, TFLMReference
from quarl_edge.core.envs import output_to_action, make_gym
from quarl_edge.targets.boards import get_board
run = Path(sys.argv[1]); what = sys.argv[2:] or ["eval", "int8", "hil"]
env = Run(run).load()["env"]
out = {}
if "eval" in what:
    L = RecurrentLayers.load(run / WEIGHTS_FILE)
    r, _ = play_recurrent(env, L, range(20))
    out["fp32_numpy_returns"] = r.tolist(); out["fp32_mean"] = float(r.mean())
    print("fp32 numpy", r.mean(), r.min(), flush=True)
for sch in ("fp32", "int8"):
    if not Run(run).has_model(sch):
        pipeline.quantize(run, sch)
if "int8" in what:
    space = make_gym(env).action_space
    for name, cls in (("tflite-runtime", TFLiteRuntime), ("tflm", TFLMReference)):
        for sch in ("fp32", "int8"):
            ref = cls(Run(run).tflite(sch))
            rets, _, acts = play(env, lambda o: output_to_action(ref.run([o])[0].reshape(-1), space),
                                 list(range(20)), on_start=ref.reset)
            out[f"{name}_{sch}"] = float(np.mean(rets)); out[f"{name}_{sch}_actions"] = acts
            print(name, sch, np.mean(rets), min(rets), flush=True)
    out["int8_tflite_equals_tflm_actions"] = out["tflite-runtime_int8_actions"] == out["tflm_int8_actions"]
    print("int8 tflite-runtime actions == tflm actions:", out["int8_tflite_equals_tflm_actions"])
    for k in [k for k in out if k.endswith("_actions")]:
        del out[k]
if "hil" in what:
    t = time.time()
    r = pipeline.hil(run, get_board("mps2-an386"), "fp32", 20, seed=0)
    out["hil"] = {k: r[k] for k in ["mean_return", "micro_mean_return", "tflite_mean_return",
                  "fp32_mean_return", "matches_reference", "actions_equal_reference",
                  "agreement", "latency", "memory", "link"]}
    print("hil", out["hil"], time.time() - t, flush=True)
(run / "figures.json").write_text(json.dumps(out, indent=1))
