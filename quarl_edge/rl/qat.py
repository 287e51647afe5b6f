"""Quantization-aware training (QAT): in the RL loop (`qat-int8`, `qat-int8x4`: DQN) and by
on-policy distillation from the fp32 network (`qat-distill-int8`, `qat-distill-int8x4`: every
algorithm; see the end). The x4 schemes fake-quantize the Dense kernels to 4 bits
(rl/qat_lowbit.py); everything else is the same.

QuaRL's finding is that QAT matches or beats post-training quantization, and this module does
QAT the RL way: the trained network is copied into a fake-quantized tfmot model (TensorFlow
Model Optimization's `quantize_model`, default 8-bit scheme: per-tensor symmetric int8 weights,
asymmetric int8 activations), and the *RL algorithm itself* keeps training it.

For DQN (the only algorithm supported so far): double DQN with the run's own n-step return,
gamma, batch size and gradient clipping, Huber TD loss, on a replay buffer filled by the current
fake-quantized policy (epsilon-greedy) during fine-tuning; a fake-quantized target network copied
every `target_update_period` gradient steps. Gradients pass the fake quantizers straight
through; activation ranges follow their moving averages. The loop is `finetune_dqn`; its replay
buffer, env step and gradient step are in rl/qat_dqn.py.

Before fine-tuning, the fake quantizers' ranges are initialised from the float network instead of
tfmot's default [-6, 6] (which would clip DQN Q-values of 30-100): activation ranges from the
calibration observations, weight ranges from the weights, a tanh layer's pre-activation range
from the calibration observations clipped to +-TANH_PRE_RANGE (actors). The step-0 model is
therefore close to post-training int8, and fine-tuning starts from there.

The greedy fake-quantized policy is evaluated on the validation seeds (10_000 + k, as in
training; never the test seeds) every `eval_every` env steps, and the best one is kept (ties:
the later). quant/schemes.py converts it with Optimize.DEFAULT and float32 inference types into
QUANTIZE -> FULLY_CONNECTED... -> DEQUANTIZE. `RUN/qat.json` records the fine-tuning curve.

Seeds: replay collection starts at QAT_SEED_BASE + 1000 * seed (distinct from test, validation
and calibration seeds).

qat-distill (the `qat-distill-int8` scheme, `qat_distill`): a second QAT method, reported apart
from the RL-loop one, that works for every algorithm because it needs only the exported policy
network (runs keep no critic or value network, so actor-critic runs cannot be fine-tuned by
their RL loss). On-policy distillation, DAgger-style: the student is the same fake-quantized
copy (`qat_model`, same range initialisation), the teacher is the run's fp32 network.

  - Data: the calibration observations, plus every round the states visited by the *student's*
    greedy policy (fake-quantized forward; argmax of Q-values or logits, or the actor's action
    clipped to the bounds; envs.play_batched) in `episodes_per_round` episodes on seeds
    QAT_DISTILL_SEED_BASE + 1000 * seed + k (40_000 + k: distinct from the test seeds 0..N,
    validation 10_000 + k, calibration 20_000 + k and RL-loop QAT 30_000 + ...), all
    aggregated and labelled with the teacher's fp32 outputs, until `steps` env steps.
  - Fit: `updates_per_round` Adam steps per round on minibatches of the aggregate. Loss "auto":
    MSE on all outputs for Q-values (they stay Q-values: the int8 output range and the
    comparison with fp32 keep their meaning; "centred" fits Q - mean_a Q only) and for actions;
    KL(softmax(teacher) || softmax(student)) for discrete PPO's logits (what the study reports
    for them). Gradients pass the fake quantizers straight through; the activation ranges
    follow tfmot's moving averages as in the RL-loop QAT (`freeze_ranges` keeps the calibrated
    ones).
  - Selection: the greedy student on the validation seeds after every `eval_every` rounds and
    after the last; the best is kept (ties: the later), as in the RL-loop QAT.
  - Log: RUN/qat-distill.json (4-bit weights: RUN/qat-distill-int8x4.json; config, seeds, rounds, states, seconds, the teacher's validation
    return, the curve with each round's validation return, loss and MSE to the teacher on the
    calibration observations, and the best round).

Default budget (3000 env steps, 100 gradient steps per 2 episodes): 9-14 s per run on 2 cores
under a load of ~7 for the classic-control runs (docs/pipeline.md, quantize: measured returns).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.files import write_atomic
from .qat_dqn import NStepReplay, dqn_steps, env_step
from ..core.nets import keras_runner, mlp_forward, mlp_layers
from .qat_lowbit import quantize_model_int4
from ..core.run import VALIDATION_SEED_BASE, load_keras, load_run
from ..core.envs import make_gym, play_batched

QAT_SEED_BASE = 30_000


@dataclass
class QATConfig:
    steps: int = 5_000               # env steps of fine-tuning (0: only initialise the ranges)
    learning_rate: float = 1e-4      # smaller than training's: this starts from a good policy
    epsilon: float = 0.05            # exploration while collecting
    train_every: int | None = None   # None: the run's values (DQN: 256 env steps,
    updates_per_train: int | None = None   # 128 gradient steps per round,
    target_update_period: int | None = None  # target copy every 128 gradient steps)
    eval_every: int = 1_000
    eval_episodes: int = 10
    weight_bits: int = 8             # 4: the qat-int8x4 scheme (rl/qat_lowbit.py)

    def __post_init__(self):
        if self.steps < 0:
            raise QuarlError(f"qat steps must be >= 0, got {self.steps}")
        if self.weight_bits not in (8, 4):
            raise QuarlError(f"qat weight_bits must be 8 or 4, got {self.weight_bits}")


# A tanh layer is fake-quantized *before* its activation (tfmot; TFLite's int8 TANH has a fixed
# output scale of 1/128): its pre-activation range is the calibration range clipped to
# +-TANH_PRE_RANGE, where tanh is within int8's output step of +-1 (tanh(4) = 1 - 6.7e-4).
# Saturating actors (TD3, DDPG) reach pre-activations of +-25; that whole range at int8 would
# cost 0.2 per step near 0, where the action is fine-tuned.
TANH_PRE_RANGE = 4.0


def _activation_ranges(model, calibration: np.ndarray) -> dict[str, tuple[float, float]]:
    """Per Dense layer name: the (min, max) of its output on the calibration data; "input" too,
    and "<name>/pre" for the pre-activation of a tanh layer (clipped, see TANH_PRE_RANGE).
    A network that is not a plain MLP (a CNN): per layer with a kernel or pooling, its output's
    range, TensorFlow computing them."""
    x = np.asarray(calibration, np.float32).reshape(len(calibration), -1)
    ranges = {"input": (float(x.min()), float(x.max()))}
    try:
        mlp_layers(model)
    except QuarlError:
        return {**ranges, **_layer_output_ranges(model, calibration)}
    names = [layer.name for layer in model.layers if layer.__class__.__name__ == "Dense"]
    for name, (kernel, bias, act) in zip(names, mlp_layers(model)):
        pre = mlp_forward([(kernel, bias, "linear")], x)
        if act == "tanh":
            ranges[f"{name}/pre"] = (max(float(pre.min()), -TANH_PRE_RANGE),
                                     min(float(pre.max()), TANH_PRE_RANGE))
        x = mlp_forward([(kernel, bias, act)], x)
        ranges[name] = (float(x.min()), float(x.max()))
    return ranges


def _layer_output_ranges(model, calibration: np.ndarray) -> dict[str, tuple[float, float]]:
    """(min, max) of the output of every layer of `model` that computes (Dense, convolutions,
    pooling) on `calibration`, by layer name."""
    import tensorflow as tf
    names = [layer.name for layer in model.layers
             if layer.__class__.__name__ not in ("InputLayer", "Flatten", "Reshape", "Dropout")]
    probe = tf.keras.Model(model.inputs, [model.get_layer(n).output for n in names])
    outputs = probe(np.asarray(calibration, np.float32), training=False)
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return {n: (float(np.min(o)), float(np.max(o))) for n, o in zip(names, outputs)}


def _kernel_range(kernel: np.ndarray, n: int) -> np.ndarray | float:
    """The symmetric range of a kernel for a quantizer variable of n values: the largest |w|
    per tensor (n == 1) or per output channel (the trailing axes holding n values)."""
    a = np.abs(np.asarray(kernel, np.float32))
    return float(a.max()) if n <= 1 else a.reshape(-1, n).max(axis=0)


def qat_model(model, calibration: np.ndarray, weight_bits: int = 8):
    """A fake-quantized tfmot copy of the Keras network `model` (an MLP or a sequential CNN; its
    weights, the original left untouched), its quantizer ranges initialised from `calibration`
    and the weights; weight_bits 4: Dense kernels fake-quantized to 4 bits (rl/qat_lowbit.py)."""
    import tensorflow as tf
    import tensorflow_model_optimization as tfmot

    copy = tf.keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    if weight_bits == 4:
        qmodel = quantize_model_int4(copy)
    else:
        qmodel = tfmot.quantization.keras.quantize_model(copy)
    ranges = _activation_ranges(model, calibration)
    kernels = {layer.name: layer.get_weights()[0] for layer in model.layers
               if layer.__class__.__name__ in ("Dense", "Conv2D", "DepthwiseConv2D")}
    for layer in qmodel.layers:
        kind = layer.__class__.__name__
        if kind == "QuantizeLayer":
            name = "input"
        elif kind.startswith("QuantizeWrapper"):
            name = layer.layer.name
        else:
            continue
        for v in layer.weights:
            leaf = v.name.split("/")[-1].split(":")[0]
            if leaf.endswith(("kernel_min", "kernel_max")) and name in kernels:
                # per tensor (Dense), or per output channel (tfmot's convolutions)
                r = _kernel_range(kernels[name], int(np.prod(v.shape)))
                v.assign(-r if leaf.endswith("min") else r)
                continue
            elif leaf.endswith(("pre_activation_min", "pre_activation_max")) \
                    and f"{name}/pre" in ranges:
                lo, hi = ranges[f"{name}/pre"]
            elif (leaf.endswith(("post_activation_min", "post_activation_max"))
                  or (kind == "QuantizeLayer" and leaf.endswith(("_min", "_max")))) \
                    and name in ranges:  # the input layer is quantize_layer_<k> after the first
                lo, hi = ranges[name]
            else:
                continue
            lo, hi = min(lo, 0.0), max(hi, 0.0)  # a range always holds 0 (exact zero point)
            v.assign(lo if leaf.endswith("min") else hi)
    return qmodel


def qat_finetune(run_dir: Path, calibration: np.ndarray, seed: int = 0, progress: bool = False,
                 **options):
    """Fine-tune the run's network with fake quantization in the RL loop; returns the tfmot model
    (the best on the validation seeds), ready for quantize.convert_keras(model, "qat-int8")."""

    run_dir = Path(run_dir)
    run = load_run(run_dir)
    cfg = _config(QATConfig, options, "qat")
    if run.get("algo", "dqn") != "dqn":
        # runs keep no critic or value network, so an actor-critic policy cannot be trained
        # further by its own RL loss; distillation needs only the policy network
        distill = "qat-distill-int8" if cfg.weight_bits == 8 else "qat-distill-int8x4"
        raise QuarlError(f"qat-int8 fine-tunes in the RL loop of dqn only; this run is "
                         f"{run.get('algo')!r} (known: dqn); QAT for every algorithm: the "
                         f"scheme {distill} (on-policy distillation)")
    if calibration is None:
        raise QuarlError("qat-int8 needs calibration observations to initialise its ranges")
    model = load_keras(run_dir)
    log = "qat.json" if cfg.weight_bits == 8 else f"qat-int8x{cfg.weight_bits}.json"
    return finetune_dqn(model, run, calibration, cfg, seed, run_dir / log, progress)


def finetune_dqn(model, run: dict, calibration: np.ndarray, cfg: QATConfig, seed: int,
                 log_path: Path | None = None, progress: bool = False):
    """Fine-tune the fake-quantized copy of the DQN Q-network `model` in the DQN loop, with the
    run's hyperparameters (`run`: its run.json) and `cfg`'s budget; returns the copy with the
    best validation return, the log written to `log_path`. See the module's docstring."""
    import tensorflow as tf  # heavy: only when fine-tuning
    from tqdm import tqdm


    hp = run.get("hyperparameters", {})
    gamma, n_step = float(hp.get("gamma", 0.99)), int(hp.get("n_step", 1))
    double, batch = bool(hp.get("double", True)), int(hp.get("batch_size", 64))
    clip = hp.get("gradient_clipping")
    train_every = cfg.train_every or int(hp.get("train_every", 256))
    updates = cfg.updates_per_train or int(hp.get("updates_per_train", 128))
    target_period = cfg.target_update_period or int(hp.get("target_update_period", 128))
    env_id = run["env"]

    tf.keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    qmodel = qat_model(model, calibration, cfg.weight_bits)
    target = qat_model(model, calibration, cfg.weight_bits)
    target.set_weights(qmodel.get_weights())
    policy, train_step = dqn_steps(qmodel, target, cfg.learning_rate, double, clip)
    val_seeds = [VALIDATION_SEED_BASE + k for k in range(cfg.eval_episodes)]

    def validate() -> float:
        return float(np.mean(play_batched(env_id, policy, val_seeds)[0]))

    curve = [{"step": 0, "greedy_return": validate(), "loss": None}]
    best = {"return": curve[0]["greedy_return"], "step": 0, "weights": qmodel.get_weights()}

    env = make_gym(env_id)
    n_actions = int(env.action_space.n)
    replay = NStepReplay(max(cfg.steps, 1), env.observation_space.shape, n_step, gamma)
    obs, _ = env.reset(seed=QAT_SEED_BASE + 1000 * seed)
    obs = np.asarray(obs, np.float32)
    grad_steps, loss = 0, None
    t0 = time.perf_counter()
    bar = tqdm(range(1, cfg.steps + 1), desc=f"qat {env_id}", disable=not progress,
               mininterval=1.0, unit="step")
    for step in bar:
        if rng.random() < cfg.epsilon:
            action = int(rng.integers(n_actions))
        else:
            action = int(np.argmax(policy(obs[None])[0]))
        obs = env_step(env, obs, action, replay)
        if step % train_every == 0 and replay.size >= batch:
            for _ in range(updates):
                loss = float(train_step(*replay.sample(rng, batch)))
                grad_steps += 1
                if grad_steps % target_period == 0:
                    target.set_weights(qmodel.get_weights())
        if step % cfg.eval_every == 0 or step == cfg.steps:
            greedy = validate()
            curve.append({"step": step, "greedy_return": greedy, "loss": loss})
            if greedy >= best["return"]:
                best = {"return": greedy, "step": step, "weights": qmodel.get_weights()}
            bar.set_postfix(greedy=f"{greedy:.0f}", best=f"{best['return']:.0f}")
    bar.close()
    env.close()
    qmodel.set_weights(best["weights"])
    _write_log(log_path, {
        "config": asdict(cfg), "seed": seed, "gamma": gamma, "n_step": n_step,
        "double": double, "gradient_steps": grad_steps,
        "seconds": round(time.perf_counter() - t0, 2),
        "best_step": best["step"], "best_validation_return": best["return"], "curve": curve})
    return qmodel


def _write_log(log_path: Path | None, log: dict) -> None:
    if log_path is not None:
        write_atomic(Path(log_path), json.dumps(log, indent=2) + "\n")


# ------------------------------------------------------------- QAT by on-policy distillation
# The `qat-distill-int8` scheme: a second, separately reported QAT method that works for every
# algorithm, because it needs only the exported policy network (runs keep no critic).
QAT_DISTILL_SEED_BASE = 40_000
DISTILL_LOSSES = ("auto", "mse", "centred", "kl")


@dataclass
class DistillConfig:
    steps: int = 3_000               # env steps of student rollouts in all (0: ranges only)
    episodes_per_round: int = 2      # student episodes per DAgger round, played in lockstep
    updates_per_round: int = 100     # gradient steps per round, on the aggregated states
    batch_size: int = 128
    learning_rate: float = 1e-4
    loss: str = "auto"               # auto: kl for logits (discrete PPO), mse otherwise
    freeze_ranges: bool = False      # True: keep the calibrated ranges (training=False)
    eval_every: int = 1              # rounds between validations (and after the last round)
    eval_episodes: int = 10
    weight_bits: int = 8             # 4: the qat-distill-int8x4 scheme (rl/qat_lowbit.py)

    def __post_init__(self):
        if self.steps < 0:
            raise QuarlError(f"distill steps must be >= 0, got {self.steps}")
        if self.weight_bits not in (8, 4):
            raise QuarlError(f"distill weight_bits must be 8 or 4, got {self.weight_bits}")
        if min(self.episodes_per_round, self.updates_per_round, self.batch_size,
               self.eval_every, self.eval_episodes) <= 0:
            raise QuarlError("distill episodes_per_round, updates_per_round, batch_size, "
                             "eval_every and eval_episodes must be positive")
        if self.loss not in DISTILL_LOSSES:
            raise QuarlError(f"unknown distill loss {self.loss!r}; known: "
                             f"{', '.join(DISTILL_LOSSES)}")


def _config(cls, options: dict, what: str):
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise QuarlError(f"unknown {what} option(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    return cls(**options)


def output_kind(run: dict, space) -> str:
    """What the exported network outputs: "q_values" (DQN), "logits" (discrete PPO) or
    "action" (a deterministic actor)."""
    if not hasattr(space, "n"):
        return "action"
    return "logits" if run.get("algo", "dqn") == "ppo" else "q_values"


def qat_distill(run_dir: Path, calibration: np.ndarray, seed: int = 0, progress: bool = False,
                **options):
    """QAT by on-policy distillation from the run's fp32 network (any algorithm); returns the
    tfmot model (the best on the validation seeds), ready for
    quantize.convert_keras(model, "qat-distill-int8") (weight_bits=4: "qat-distill-int8x4").
    Log: RUN/qat-distill.json (weight_bits=4: RUN/qat-distill-int8x4.json)."""

    run_dir = Path(run_dir)
    run = load_run(run_dir)
    cfg = _config(DistillConfig, options, "qat-distill")
    if calibration is None:
        raise QuarlError("qat-distill-int8 needs calibration observations (ranges and data)")
    model = load_keras(run_dir)
    return distill(model, run, calibration, cfg, seed, run_dir / distill_log_name(cfg.weight_bits),
                   progress)


def distill_log_name(weight_bits: int = 8) -> str:
    """The distillation log's file name in the run directory, per weight width."""
    return "qat-distill.json" if weight_bits == 8 else f"qat-distill-int8x{weight_bits}.json"


def distill(model, run: dict, calibration: np.ndarray, cfg: DistillConfig, seed: int,
            log_path: Path | None = None, progress: bool = False):
    """DAgger-style distillation of the fake-quantized copy of `model` (the student) from
    `model` itself in fp32 (the teacher): see the module's docstring, section "qat-distill"."""
    import tensorflow as tf  # heavy: only when fine-tuning
    from tqdm import tqdm


    env_id = run["env"]
    gym_env = make_gym(env_id)
    space, obs_shape = gym_env.action_space, tuple(gym_env.observation_space.shape)
    gym_env.close()
    kind = output_kind(run, space)
    loss_kind = _loss_kind(cfg, kind, env_id)
    teacher_net = keras_runner(model)   # an MLP in numpy, a CNN through TensorFlow

    def teacher(x):
        return np.asarray(teacher_net(x), np.float32)

    tf.keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    student = qat_model(model, calibration, cfg.weight_bits)
    policy, train_step = _distill_steps(student, cfg, loss_kind)
    val_seeds = [VALIDATION_SEED_BASE + k for k in range(cfg.eval_episodes)]

    def validate(fn) -> float:
        return float(np.mean(play_batched(env_id, fn, val_seeds)[0]))

    t0 = time.perf_counter()
    states = np.asarray(calibration, np.float32).reshape(len(calibration), *obs_shape)
    targets = teacher(states)
    teacher_return = validate(teacher)
    calib_states, calib_targets = states, targets

    def calibration_mse() -> float:   # the fake-quantized student against the teacher
        return float(np.mean((policy(calib_states) - calib_targets) ** 2))

    curve = [{"round": 0, "env_steps": 0, "states": len(states), "greedy_return": validate(policy),
              "loss": None, "calibration_mse": calibration_mse()}]
    best = {"return": curve[0]["greedy_return"], "round": 0, "env_steps": 0,
            "weights": student.get_weights()}
    env_steps, rnd, episode, grad_steps, loss = 0, 0, 0, 0, None
    bar = tqdm(total=cfg.steps, desc=f"qat-distill {env_id}", disable=not progress,
               mininterval=1.0, unit="step")
    while env_steps < cfg.steps and episode + cfg.episodes_per_round <= 1000:
        rnd += 1
        visited = _student_states(env_id, policy, seed, episode, cfg)    # DAgger: its own states
        episode += cfg.episodes_per_round
        env_steps += len(visited)
        bar.update(len(visited))
        states = np.concatenate([states, visited])
        targets = np.concatenate([targets, teacher(visited)])             # the teacher's labels
        loss = _fit(train_step, states, targets, rng, cfg)
        grad_steps += cfg.updates_per_round
        if rnd % cfg.eval_every == 0 or env_steps >= cfg.steps:
            greedy = validate(policy)
            curve.append({"round": rnd, "env_steps": env_steps, "states": len(states),
                          "greedy_return": greedy, "loss": loss,
                          "calibration_mse": calibration_mse()})
            if greedy >= best["return"]:   # ties: the later
                best = {"return": greedy, "round": rnd, "env_steps": env_steps,
                        "weights": student.get_weights()}
            bar.set_postfix(greedy=f"{greedy:.0f}", best=f"{best['return']:.0f}")
    bar.close()
    student.set_weights(best["weights"])
    _write_log(log_path, {
        "method": "on-policy distillation (DAgger) from the fp32 network",
        "config": asdict(cfg), "seed": seed, "output": kind, "loss": loss_kind,
        "rollout_seeds": [QAT_DISTILL_SEED_BASE + 1000 * seed,
                          QAT_DISTILL_SEED_BASE + 1000 * seed + episode - 1] if episode else [],
        "rounds": rnd, "env_steps": env_steps, "gradient_steps": grad_steps,
        "states": len(states), "calibration_states": len(calibration),
        "seconds": round(time.perf_counter() - t0, 2),
        "teacher_validation_return": teacher_return,
        "best_round": best["round"], "best_env_steps": best["env_steps"],
        "best_validation_return": best["return"], "curve": curve})
    return student


def _loss_kind(cfg: DistillConfig, kind: str, env_id: str) -> str:
    """The distillation loss for a network outputting `kind` (output_kind): cfg.loss, or for
    "auto" KL on logits and MSE otherwise."""
    loss_kind = cfg.loss if cfg.loss != "auto" else ("kl" if kind == "logits" else "mse")
    if loss_kind in ("centred", "kl") and kind == "action":
        raise QuarlError(f"distill loss {loss_kind!r} is for argmax heads; {env_id} has "
                         "continuous actions (use mse)")
    return loss_kind


def _student_states(env_id: str, policy, seed: int, episode: int, cfg: DistillConfig):
    """The states the student's greedy `policy` visits in a round's episodes (on seeds
    QAT_DISTILL_SEED_BASE + 1000 seed + episode + i, i < episodes_per_round), in lockstep."""
    seeds = [QAT_DISTILL_SEED_BASE + 1000 * seed + episode + i
             for i in range(cfg.episodes_per_round)]
    return play_batched(env_id, policy, seeds, record=True)[1]


def _fit(train_step, states: np.ndarray, targets: np.ndarray, rng: np.random.Generator,
         cfg: DistillConfig) -> float:
    """A round's `updates_per_round` gradient steps on random minibatches of the aggregated
    (states, teacher's outputs); the last step's loss."""
    for _ in range(cfg.updates_per_round):
        idx = rng.integers(0, len(states), size=cfg.batch_size)
        loss = float(train_step(states[idx], targets[idx]))
    return loss


def _distill_steps(student, cfg: DistillConfig, loss_kind: str):
    """(policy, gradient step) of the distillation: the fake-quantized `student`'s outputs
    (numpy in and out, a traced call); one traced Adam step on a batch (states, the teacher's outputs) of the `loss_kind` loss
    (the ranges follow their moving averages unless cfg.freeze_ranges)."""
    import tensorflow as tf  # heavy: only when fine-tuning

    optimizer = tf.keras.optimizers.Adam(learning_rate=cfg.learning_rate)

    @tf.function(reduce_retracing=True)
    def forward(x):
        return student(x, training=False)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            out = student(x, training=not cfg.freeze_ranges)
            if loss_kind == "kl":      # KL(softmax(teacher) || softmax(student)), in nats
                p = tf.nn.softmax(y)
                loss = tf.reduce_mean(tf.reduce_sum(
                    p * (tf.nn.log_softmax(y) - tf.nn.log_softmax(out)), axis=1))
            elif loss_kind == "centred":  # argmax-relevant part: outputs minus their mean
                d = ((out - tf.reduce_mean(out, axis=1, keepdims=True))
                     - (y - tf.reduce_mean(y, axis=1, keepdims=True)))
                loss = tf.reduce_mean(tf.square(d))
            else:
                loss = tf.reduce_mean(tf.square(out - y))
        variables = student.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    def policy(x):
        return forward(tf.constant(np.asarray(x, np.float32))).numpy()
    return policy, train_step

