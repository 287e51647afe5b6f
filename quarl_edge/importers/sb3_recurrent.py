"""sb3-contrib's RecurrentPPO (MlpLstmPolicy, Discrete actions) as a recurrent run: the one-step
Keras model of rl/recurrent.py whose LSTM state the board keeps and resets per episode, checked
against SB3's recurrence re-done in numpy on greedy episodes."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..quant.calibration import CALIBRATION_SEED_BASE
from ..rl.recurrent import (CELL_CLIP, RecurrentLayers, fold_normalization,
                            one_step_keras)
from .common import Imported, PolicyImportError, check_spaces, sha256
from .sb3_format import activation_of
from .sb3_forward import ACT
from .sb3_networks import check_chain, linear, sequential
from .vecnormalize import read_vecnormalize, vecnormalize_file
from ..core.envs import make_gym


def recurrent_layers(sd: dict, act: str, path: Path):
    """RecurrentPPO's greedy actor (MlpLstmPolicy, one LSTM layer) as rl.recurrent's
    RecurrentLayers: observation -> lstm_actor -> mlp_extractor.policy_net -> action_net.
    torch's LSTM gates are in Keras's order (i, f, g=c, o); its two biases add up to Keras's
    one."""
    if "lstm_actor.weight_ih_l1" in sd:
        raise PolicyImportError(f"{path}: an LSTM of more than one layer is not supported")
    if any(k.startswith("features_extractor.cnn") or ".cnn." in k for k in sd):
        raise PolicyImportError(f"{path}: a recurrent CnnLstmPolicy is not supported yet")
    try:
        lstm = (sd["lstm_actor.weight_ih_l0"].T.astype(np.float32),
                sd["lstm_actor.weight_hh_l0"].T.astype(np.float32),
                (sd["lstm_actor.bias_ih_l0"].astype(np.float64)
                 + sd["lstm_actor.bias_hh_l0"]).astype(np.float32))
        hidden = [(w, b, act) for w, b in sequential(sd, "mlp_extractor.policy_net")]
        dense = hidden + [(*linear(sd, "action_net"), "linear")]
    except KeyError as e:
        raise PolicyImportError(f"{path}: tensor {e} missing for a RecurrentPPO policy") from None
    except ValueError:    # the two biases of different shapes
        raise PolicyImportError(f"{path}:policy.pth: the LSTM's biases do not fit") from None
    units = lstm[1].shape[0] if lstm[1].ndim == 2 else -1
    if lstm[0].ndim != 2 or lstm[1].shape != (units, 4 * units) or \
            lstm[0].shape[1] != 4 * units or lstm[2].shape != (4 * units,):
        raise PolicyImportError(f"{path}:policy.pth: the LSTM's tensors of shapes "
                                f"{[a.shape for a in lstm]} do not make one LSTM")
    check_chain([(np.zeros((1, units)), np.zeros(units), "linear"), *dense], None, path)
    return RecurrentLayers([], lstm, dense)


def _lstm_reference(layers, norm: dict):
    """SB3's RecurrentPPO actor stepped in numpy float64 from the unfolded arrays: VecNormalize
    (with its clip), torch's LSTM (no cell clip), the MLP and the logits. Returns step(obs [1,
    *obs], state | None) -> (logits, state), a None state starting an episode."""
    kernel, rec, bias = (a.astype(np.float64) for a in layers.lstm)
    u = rec.shape[0]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731

    def step(obs, state):
        x = np.asarray(obs, np.float64).reshape(1, -1)
        if norm:
            x = np.clip((x - norm["mean"].reshape(-1)) / np.sqrt(norm["var"].reshape(-1)
                                                                + norm["epsilon"]),
                        -norm["clip_obs"], norm["clip_obs"])
        h, c = state if state is not None else (np.zeros((1, u)), np.zeros((1, u)))
        z = x @ kernel + h @ rec + bias
        i, f, g, o = sig(z[:, :u]), sig(z[:, u:2 * u]), np.tanh(z[:, 2 * u:3 * u]), sig(z[:, 3 * u:])
        c = f * c + i * g
        h = o * np.tanh(c)
        y = h
        for k, b, a in layers.dense_out:
            y = ACT[a](y @ k.astype(np.float64) + b.astype(np.float64))
        return y, (h, c)
    return step


def _recurrent_fidelity(env_id: str, layers, folded, norm: dict, episodes: int = 5) -> dict:
    """The imported one-step policy (folded, with TFLite's cell clip) against SB3's recurrence
    in numpy (unfolded, unclipped) on greedy episodes of the imported policy, state reset at
    each start (seeds off the test seeds): the same argmax at every step, and how far the cell
    state got (past CELL_CLIP the converted LSTM clips where SB3's does not)."""
    ref_step = _lstm_reference(layers, norm)
    env = make_gym(env_id)
    steps = agree = 0
    cell = 0.0
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=CALIBRATION_SEED_BASE + 777 + k)
            ours, theirs, done = folded.zero_state(), None, False
            while not done and steps < 20_000:
                o = np.asarray(obs, np.float32)[None]
                out, ours = folded.step(o, ours)
                ref, theirs = ref_step(o, theirs)
                cell = max(cell, float(np.max(np.abs(theirs[1]))))
                a = int(np.argmax(out[0]))
                agree += a == int(np.argmax(ref[0]))
                steps += 1
                obs, _, term, trunc, _ = env.step(a)
                done = term or trunc
    finally:
        env.close()
    result = {"observations": steps, "episodes": episodes,
              "reference": "sb3-contrib RecurrentPPO's LSTM in numpy float64 from the zip's "
                           "tensors, state reset per episode",
              "argmax_agreement": agree / max(steps, 1), "max_abs_cell_state": cell,
              "cell_clip": CELL_CLIP}
    result["ok"] = agree == steps
    if not result["ok"]:
        raise PolicyImportError(f"the imported recurrent policy does not act as SB3's does on "
                           f"{steps} steps of {env_id}: {result}")
    return result


def load_recurrent(path: Path, data: dict, sd: dict, version: str, obs: dict, action: dict,
                    env_id: str, vecnormalize: Path | None) -> Imported:
    """A RecurrentPPO zip (MlpLstmPolicy, Discrete actions) as a recurrent run: the one-step
    Keras model (rl/recurrent.py) whose LSTM state the board keeps and resets per episode."""
    if obs["type"] != "box" or action["type"] != "discrete":
        raise PolicyImportError(f"{path}: RecurrentPPO with {action['type']} actions: recurrent "
                           "policies are supported with Discrete actions (the argmax head)")
    check_spaces(env_id, tuple(obs["shape"]), action, str(path))
    layers = recurrent_layers(sd, activation_of(data, "recurrentppo", path), path)
    if layers.lstm[0].shape[0] != int(np.prod(obs["shape"])):
        raise PolicyImportError(f"{path}:policy.pth: the LSTM takes {layers.lstm[0].shape[0]} "
                                f"inputs, the observations have shape {tuple(obs['shape'])}")
    vecnormalize = vecnormalize_file(path, vecnormalize)
    norm = read_vecnormalize(vecnormalize) if vecnormalize is not None else {}
    folded = layers if not norm else fold_normalization(
        layers, norm["mean"], np.sqrt(norm["var"] + norm["epsilon"]))
    checked = _recurrent_fidelity(env_id, layers, folded, norm)
    model = one_step_keras(tuple(obs["shape"]), folded, name="sb3_recurrentppo")
    source = {"kind": "stable-baselines3", "file": path.name, "sha256": sha256(path),
              "version": version, "algo": "RecurrentPPO", "policy": "MlpLstmPolicy",
              "num_timesteps": steps if isinstance(steps := data.get("num_timesteps"), int)
              else None}
    if norm:
        source["vecnormalize"] = {"file": Path(vecnormalize).name,
                                  "sha256": sha256(vecnormalize), "clip_obs": norm["clip_obs"],
                                  "epsilon": norm["epsilon"], "folded_into": "the LSTM's input"}
    return Imported(model=model, env_id=env_id, algo="sb3-recurrentppo", source=source,
                    reference=lambda o: None, reference_name=checked["reference"],
                    network={"type": "lstm", "hidden": [int(k.shape[1]) for k, _, _ in
                                                        folded.dense_out[:-1]],
                             "lstm_units": folded.units, "activation": folded.dense_out[0][2]
                             if len(folded.dense_out) > 1 else "linear",
                             "head": "linear", "recurrent": True},
                    checked=checked, recurrent=folded)
