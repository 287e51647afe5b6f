"""The commands that make a run directory and its models: train, import, quantize and sweep;
and export, which makes the C library of a run's model.
Each command's options, then its handler: it calls the API (`qe`) and prints the result."""
from __future__ import annotations

import tomllib
from pathlib import Path

from ..core.errors import QuarlError
from ..core.names import ALGOS, IMPORT_KINDS, SCHEMES, SWEEP_MODES
from .options import (board_option, command, int_in, json_option, nonnegative_int, positive_int,
                      scheme_option)
from .output import as_json, emit_json, kib, note, table


def add_commands(sub) -> None:
    """train, import, quantize and sweep, in --help's order."""
    _add_train(sub)
    _add_import(sub)
    _add_quantize(sub)
    _add_sweep(sub)
    _add_export(sub)


# --------------------------------------------------------------------------------- train
def _add_train(sub) -> None:
    """train: a run directory from TF-Agents training."""
    s = command(sub, "train", "train a policy with TF-Agents on a Gymnasium environment",
                "quarl-edge train --env CartPole-v1 --algo dqn --out runs/cartpole", cmd_train)
    s.add_argument("--env", default="CartPole-v1",
                   help="any Gymnasium id; tuned defaults exist for CartPole-v1, Acrobot-v1, "
                        "MountainCar-v0, LunarLander-v3, Pendulum-v1, MountainCarContinuous-v0, "
                        "LunarLanderContinuous-v3, HalfCheetah-v5, Hopper-v5")
    s.add_argument("--algo", default="dqn", choices=ALGOS, help="the algorithm")
    s.add_argument("--steps", type=positive_int, default=None,
                   help="environment steps (default: the tuned value for this algo and env)")
    s.add_argument("--seed", type=nonnegative_int, default=0, help="training seed")
    s.add_argument("--net", choices=("mlp", "lstm"), default=None,
                   help="the policy network: mlp, or lstm (a recurrent policy for partially "
                        "observed tasks such as QuarlEdge/CartPoleNoVel-v0; --algo ppo only); "
                        "default: the tuned value for this algo and env, else mlp")
    s.add_argument("--out", required=True, metavar="RUN", help="the run directory to write")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a field of the algo's config (quarl_edge/rl/: DQNConfig, PPOConfig, "
                        "OffPolicyConfig) over its per-env default, e.g. --set gamma=0.9 "
                        "--set hidden=[256,256]; repeatable")
    json_option(s)


def option_value(text: str) -> tuple[str, object]:
    """`KEY=VALUE` from the command line: VALUE as a TOML value (0.9, 16, [256, 256], true,
    "ou"), a bare word as a string (ou)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise QuarlError(f"--set wants KEY=VALUE, got {text!r}")
    try:
        return key.strip(), tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key.strip(), value


def cmd_train(a, qe):
    """train: the best greedy return, and what the run directory holds."""
    options = dict(option_value(t) for t in a.set)
    if a.net is not None:
        options["net"] = a.net
    res = qe.train(a.env, a.algo, out=a.out, steps=a.steps, seed=a.seed, progress=True, **options)
    if a.json:
        return emit_json(res.info)
    info = res.info
    print(f"trained {res.algo} on {res.env} (seed {res.seed}, {res.steps:,} steps) in "
          f"{res.train_seconds:.0f} s: best greedy validation return {res.best_greedy_return:.1f} "
          f"at step {info.get('best_step', '-'):,}")
    extra = "recurrent.npz, " if (Path(res.run_dir) / "recurrent.npz").is_file() else ""
    extra += "policy/, " if (Path(res.run_dir) / "policy").is_dir() else ""
    note(f"wrote the run to {res.run_dir} (run.json, {info.get('model_file', 'qnet.keras')}, "
         f"{extra}train_curve.csv)")


# -------------------------------------------------------------------------------- import
def _add_import(sub) -> None:
    """import: a run directory from a policy trained elsewhere."""
    s = command(sub, "import", "a policy trained elsewhere as a run directory (Stable-Baselines3, "
                               "ONNX, Keras, TF-Agents SavedModel)",
                "quarl-edge import ppo-LunarLander-v3.zip --out runs/lunar\n"
                "quarl-edge import policy.onnx --env Pendulum-v1 --out runs/p\n"
                "quarl-edge import rl-trained-agents/ppo/MountainCar-v0_1/ --out runs/mc",
                cmd_import)
    s.add_argument("source", metavar="SOURCE",
                   help="a Stable-Baselines3 .zip, an RL Zoo run folder (ALGO/ENV_N/), an "
                        ".onnx, a .keras/.h5 Keras model, or a TF-Agents PolicySaver / TF "
                        "SavedModel directory")
    s.add_argument("--out", required=True, metavar="RUN",
                   help="the run directory to write (must not exist, or be empty)")
    s.add_argument("--env", default=None, metavar="ID",
                   help="the Gymnasium id the policy acts in (an SB3 zip named after its env, "
                        "e.g. ppo-LunarLander-v3.zip, needs none)")
    s.add_argument("--vecnormalize", default=None, metavar="PKL",
                   help="SB3: VecNormalize statistics to fold into the network (default: "
                        "NAME.vecnormalize.pkl or vecnormalize.pkl beside the zip)")
    s.add_argument("--kind", default=None,
                   choices=IMPORT_KINDS,
                   help="the source's format (default: from the file)")
    json_option(s)


def cmd_import(a, qe):
    """import: how closely the imported network matches its source, and what to run next."""
    res = qe.import_policy(a.source, out=a.out, env=a.env, vecnormalize=a.vecnormalize,
                           kind=a.kind)
    if a.json:
        return emit_json(res.info)
    fid = res.fidelity
    check = (f"argmax agreement {fid['argmax_agreement']:.3f}" if "argmax_agreement" in fid
             else f"max abs action error {fid['max_abs_error_actions']:.2e}")
    src = res.source
    what = " ".join(w for w in (src["kind"], src.get("algo")) if w)
    print(f"imported the {what} policy {src['file']} for {res.env}: "
          f"{check} against {fid['reference']} on {fid['observations']:,} observations")
    if src.get("env_renamed"):
        note(f"note: {src['env_renamed']['note']}")
    note(f"wrote the run to {res.run_dir} (run.json, policy.keras, calibration.npy); next: "
         f"quarl-edge quantize {res.run_dir} --scheme fp32 int8")


# ------------------------------------------------------------------------------ quantize
def _add_quantize(sub) -> None:
    """quantize: the run's .tflite models, one per scheme."""
    s = command(sub, "quantize", "convert a trained run to .tflite models, one per scheme",
                "quarl-edge quantize runs/cartpole --scheme fp32 int8", cmd_quantize)
    s.add_argument("run", metavar="RUN", help="a run directory (from `quarl-edge train`)")
    s.add_argument("--scheme", nargs="+", default=["fp32", "fp16", "int8"], choices=SCHEMES,
                   metavar="SCHEME", help=f"schemes to write to RUN/models/, of: "
                                          f"{', '.join(SCHEMES)}")
    s.add_argument("--calib-size", type=positive_int, default=1000,
                   help="calibration observations for the integer schemes")
    s.add_argument("--qat-steps", type=positive_int, default=None,
                   help="qat-int8(x4): env steps of fine-tuning in the DQN loop (default 5000)")
    s.add_argument("--distill-steps", type=positive_int, default=None,
                   help="qat-distill-int8(x4): env steps of student rollouts in the on-policy "
                        "distillation (default 3000)")
    json_option(s)


def cmd_quantize(a, qe):
    """quantize: one row per scheme, its model and size."""
    results = qe.quantize(a.run, a.scheme, calib_size=a.calib_size, qat_steps=a.qat_steps,
                          distill_steps=a.distill_steps, progress=not a.json)
    if a.json:
        return emit_json(as_json(results))
    table(["scheme", "model", "size"], [[r.scheme, r.path, kib(r.size_bytes)] for r in results],
          right=("size",))


# --------------------------------------------------------------------------------- sweep
def _add_sweep(sub) -> None:
    """sweep: QuaRL's n-bit sweep of fake-quantized returns."""
    s = command(sub, "sweep", "QuaRL's n-bit sweep: greedy return against bits, fake-quantized",
                "quarl-edge sweep runs/cartpole --bits 4 6 8 --mode weights", cmd_sweep)
    s.add_argument("run", metavar="RUN", help="a run directory")
    s.add_argument("--bits", type=int_in(2, 16), nargs="+", default=list(range(2, 9)), metavar="N",
                   help="bit widths (2..16)")
    s.add_argument("--mode", nargs="+", default=["weights+activations", "weights"],
                   choices=SWEEP_MODES, metavar="MODE",
                   help=f"what is fake-quantized, of: {', '.join(SWEEP_MODES)}")
    s.add_argument("--per-channel", action="store_true",
                   help="per-output-channel weight ranges (default: per tensor)")
    s.add_argument("--episodes", type=positive_int, default=20, help="test seeds SEED..SEED+N-1")
    s.add_argument("--seed", type=nonnegative_int, default=0, help="the first test seed")
    json_option(s)


def cmd_sweep(a, qe):
    """sweep: one row per mode and bit width."""
    rows = qe.sweep(a.run, bits=a.bits, modes=a.mode, per_channel=a.per_channel,
                    seeds=range(a.seed, a.seed + a.episodes))
    if a.json:
        return emit_json(as_json(rows))
    table(["mode", "bits", "return (mean ± std)", "agreement", "ties"],
          [[r.mode, r.bits, f"{r.mean_return:.1f} ± {r.std_return:.1f}", f"{r.agreement:.3f}",
            "-" if r.ties is None else f"{r.ties:.3f}"] for r in rows],
          right=("bits", "return (mean ± std)", "agreement", "ties"))


# -------------------------------------------------------------------------------- export
def _add_export(sub) -> None:
    """export: the policy as a C library folder for the user's firmware."""
    s = command(sub, "export", "the policy as a C library for your firmware (plain C99, "
                               "Arduino, PlatformIO, CMake/ESP-IDF, Zephyr)",
                "quarl-edge export runs/cartpole --scheme int8 --board mps2-an386 --name "
                "cartpole --out lib/cartpole", cmd_export)
    s.add_argument("policy", metavar="RUN", help="a run directory with RUN/models/SCHEME.tflite, "
                                                  "or a bare MODEL.tflite with --env")
    scheme_option(s, "int8", f"the scheme of the run's model, of: {', '.join(SCHEMES)}")
    s.add_argument("--env", default=None, metavar="ID",
                   help="the Gymnasium id a bare MODEL.tflite plays (a run knows its env)")
    board_option(s)
    s.add_argument("--name", required=True,
                   help="the C prefix of every symbol (NAME_act, NAME_OBS_SIZE, ...) and the "
                        "library's name: a C identifier, not a keyword")
    s.add_argument("--out", required=True, metavar="DIR",
                   help="the folder to write (written beside, then renamed into place)")
    s.add_argument("--force", action="store_true",
                   help="replace --out even when it is not an earlier export")
    json_option(s)


def cmd_export(a, qe):
    """export: the folder and what the library takes."""
    import shlex
    import sys
    command_line = shlex.join(["quarl-edge", *sys.argv[1:]]) if sys.argv[1:] else ""
    res = qe.export(a.policy, a.board, scheme=a.scheme, name=a.name, out=a.out, env=a.env,
                    force=a.force, board_file=a.board_file, command=command_line)
    if a.json:
        emit_json(as_json(res))
        return 0
    fp = res.footprint
    size = (f"{fp['text'] + fp['data']} B flash, {fp['data'] + fp['bss']} B static RAM on "
            f"{fp['board']}" if fp else f"footprint not measured ({a.board}'s compiler is not "
            "installed)")
    print(f"{res.out}: {res.name}_act for {res.env} ({res.action_head}, {res.obs_size} "
          f"observations -> {res.action_size} action values), {size}; {res.name}_selftest() runs "
          f"{res.test_vectors} test vectors")
    return 0
