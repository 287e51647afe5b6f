"""Hardware-in-the-loop evaluation: Gymnasium runs on the host, the board chooses every action.

The same episodes (same seeds) are also played by the same model on tflite-runtime (the host
reference) and by the fp32 Keras network, so the board's return can be compared exactly.

A model with state (variable tensors: a recurrent policy's LSTM h and c, kept in the board's
arena between INFERs) has it zeroed at each episode's start on every side: RESET on the board
(protocol v4), reset() on tflite-runtime and TF Lite Micro, a zero state for the fp32 network
(rl/recurrent.py). The board is also RESET after each episode: its reply's boot id shows a
restart that went unannounced during the episode, which is then played again. The board's
actions are compared with the reference's step by step (`actions_equal_reference`)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core import tflite_host
from ..core.errors import QuarlError
from ..core.files import locked, open_new, own, remove_stale, write_atomic, writing
from ..link.runner import latency_summary
from ..link.session import BoardSession
from ..core.envs import default_head, make_gym, output_to_action, play_batched
from ..core.run import Run, load_run, tflite_path
from ..targets.boards import Board
from .deadline import deadline
from .energy import energy
from .episodes import (BoardPlayer, Fp32Policy, actions_equal, agreement, fp32_policy,
                       mean_std, play, reference_episodes, same_returns)
from .reference import check_env_fits_model, has_state, host_reference, tflite_runtime_interpreter


@dataclass
class HilPolicy:
    """What a HIL run plays: the model, the run it belongs to (None for a bare .tflite), the
    folder its results and builds go under, the env, its action space and the action head."""
    meta: dict | None
    model: Path
    home: Path
    env_id: str
    space: object
    action_head: str
    stateful: bool


def hil_policy(run_dir: Path, scheme: str, env_id: str | None, head: str | None) -> HilPolicy:
    """The run's `scheme` model (or a bare MODEL.tflite with `env_id`), checked against its
    env's observations and actions before anything is built."""
    if run_dir.suffix == ".tflite":
        if not run_dir.is_file():
            raise QuarlError(f"no model at {run_dir}")
        if env_id is None:
            raise QuarlError(f"{run_dir} is a bare model: say which env it plays with --env ID")
        meta, mpath, home = None, run_dir, run_dir.parent
    else:
        meta = load_run(run_dir)
        if env_id is not None and env_id != meta["env"]:
            raise QuarlError(f"{run_dir} was made for {meta['env']}, not {env_id}")
        env_id, mpath, home = meta["env"], tflite_path(run_dir, scheme), run_dir
        head = head or meta.get("action_head")
    env = make_gym(env_id)
    space = env.action_space
    head = head or default_head(space)
    _check_model_fits_env(mpath, env, head, Run(run_dir).meta_path if meta else mpath)
    env.close()
    return HilPolicy(meta, mpath, home, env_id, space, head, has_state(mpath))


class EpisodeLog:
    """The per-episode log (JSON lines, written as episodes finish) and the progress bar."""

    def __init__(self, path: Path, total: int, desc: str, progress: bool):
        from tqdm import tqdm    # the progress bar: loaded only when a HIL run starts
        self.file = open_new(path)
        self.bar = tqdm(total=total, desc=desc, unit="episode", disable=not progress,
                        leave=False)

    def hook(self, tag: str):
        """The on_episode hook of the actor `tag` (board, tflite-runtime, tflm, fp32)."""
        def f(s, ret, steps):
            self.file.write(json.dumps({"who": tag, "seed": s, "return": ret, "steps": steps})
                            + "\n")
            self.file.flush()
            self.bar.set_postfix_str(f"{tag} seed {s}: {ret:.1f}")
            self.bar.update(1)
        return f

    def close(self) -> None:
        self.bar.close()         # (an error is then printed on a line of its own)
        self.file.close()


def run_hil(run_dir: Path, scheme: str, board: Board, episodes: int, seed: int = 0,
            port: str | None = None, progress: bool = False, flasher: str | None = None,
            drive: str | None = None, results_dir: Path | None = None,
            build_dir: Path | None = None, env_id: str | None = None,
            head: str | None = None, control_hz: float | None = None, play_board=None,
            label: str | None = None, target: HilPolicy | None = None,
            fp32: Fp32Policy | None = None, firmware=None) -> dict:
    """Play `episodes` episodes of the run's env on seeds seed.. with the board choosing every
    action, then the same seeds with the same model on tflite-runtime, on TF Lite Micro (the
    reference the firmware is bit-exact with: matches_reference says whether the board's
    returns are its returns, episode by episode) and with the fp32 network. Writes results_dir
    (default RUN/results)/hil_<board>_<scheme>_seeds<first>-<last>.json and its per-episode log
    (.episodes.jsonl, named in the result) beside it, and copies both to
    hil_<board>_<scheme>.json / .episodes.jsonl (the latest); builds into build_dir (default RUN/build/<board>/<scheme>).
    `progress`: a bar per episode on stderr.

    `run_dir` may also be a bare MODEL.tflite: then `env_id` names the env, `scheme` is only
    the label of the results (MODEL's stem), there is no fp32 network to compare with
    (agreement is with tflite-runtime), and results go to MODEL's folder/results.
    `head`: how outputs become actions (envs.HEADS; default run.json's "action_head", else
    argmax for discrete actions and the output itself for Box actions).
    `control_hz`: the result's "deadline" holds every step's cost against the period
    1/control_hz (measure/deadline.py).
    `play_board`: what plays the board's episodes (default _play_board; `hil --act`:
    measure/hil_act.py), `label`: the results' and build's name for the scheme (default it).
    `target`, `fp32`, `firmware`: hil_policy's and hil_fp32's answers and the board's built
    firmware when the caller made them first (quarl_edge/pipeline.py's hil: checked, then
    built, then played); else they are made here, the firmware by the board session."""
    run_dir = Path(run_dir)
    play_board, label = play_board or _play_board, label or scheme
    t = target or hil_policy(run_dir, scheme, env_id, head)
    seeds = list(range(seed, seed + episodes))
    # the run's fp32 network before any episode: a run whose Keras file is refused stops here
    fp32 = fp32 if fp32 is not None else hil_fp32(t, run_dir)
    home = Run(t.home)
    results_dir = Path(results_dir) if results_dir is not None else home.results_dir()
    results_dir.mkdir(parents=True, exist_ok=True)
    remove_stale(results_dir)
    # one result per board, model and seeds (two runs at once keep both: files.py), and the
    # latest of the board and model under the plain name hil_<board>_<model>.json
    key = f"hil_{board.id}_{label}_seeds{seed}-{seed + episodes - 1}"
    log_path = results_dir / f"{key}.episodes.jsonl"
    # written as episodes finish, renamed to log_path with the results: a failed run keeps the
    # previous results and log (and removes its own partial log)
    partial_log = own(log_path, "partial")
    log = EpisodeLog(partial_log, 4 * episodes, f"hil {label} on {board.id}", progress)
    try:
        build_dir = Path(build_dir) if build_dir is not None else \
            home.build_dir(board.id, label)
        on_board = play_board(t, board, build_dir, seeds, log, port, flasher, drive,
                              firmware=firmware)
        refs = reference_episodes(t.model, t.env_id, seeds, t.space, t.action_head,
                                  on_episode=log.hook)
        if refs["micro"] is None:      # TFLM cannot run fp16 and hybrid models
            log.bar.update(episodes)
        fp32_returns, fp32_actions = _fp32_side(t, fp32, seeds, on_board["visited"], log)
        log.close()
        out_path = results_dir / f"{key}.json"
        result = _result(t, board, scheme, seeds, on_board, refs, fp32_returns, fp32_actions,
                         out_path, log_path)
        if control_hz is not None:
            result["deadline"] = deadline(on_board["costs"], on_board["unit"], board.clock_hz,
                                          control_hz, board.kind)
        _write_results(results_dir, board.id, label, result, out_path, partial_log, log_path)
        return result
    finally:
        log.close()
        partial_log.unlink(missing_ok=True)     # gone unless the run failed


def hil_fp32(t: HilPolicy, run_dir: Path) -> Fp32Policy | None:
    """The run's fp32 network (None for a bare model): loaded before any board is built, so a
    run whose Keras file is refused stops here."""
    return fp32_policy(run_dir) if t.meta is not None else None


def _play_board(t: HilPolicy, board: Board, build_dir: Path, seeds: list[int], log: EpisodeLog,
                port: str | None, flasher: str | None, drive: str | None,
                firmware=None) -> dict:
    """The board's episodes in one BoardSession: returns, visited observations per episode,
    actions, the cost of every inference, the wall time, memory and what the link survived.
    `firmware`: built already (pipeline.build), else the session builds it into build_dir."""
    with BoardSession(t.model, board, build_dir, port=port, flasher=flasher, drive=drive,
                      firmware=firmware) as s:
        if s.info.inputs[0].dtype != "float32":
            raise QuarlError("HIL needs a model with float input (quantize with float I/O)")
        player = BoardPlayer(s, t.space, t.action_head, stateful=t.stateful)
        t0 = time.perf_counter()
        returns, visited, actions = player.episodes(t.env_id, seeds, log.hook("board"))
        wall = time.perf_counter() - t0
        return {"returns": returns, "visited": visited, "actions": actions,
                "costs": player.costs, "wall": wall, "memory": s.memory(),
                "unit": s.info.cost_unit,
                "link": {**s.link.report(), "replayed_episodes": player.replayed}}


def _fp32_side(t: HilPolicy, fp32: Fp32Policy | None, seeds: list[int],
               visited: list[np.ndarray], log: EpisodeLog) -> tuple[list | None, list]:
    """The fp32 network's returns on the seeds and its actions on the board's states; for a
    bare model (no fp32 network) no returns, and the same model's actions on tflite-runtime."""
    space, head = t.space, t.action_head
    if t.meta is not None:
        if fp32.layers is None:   # feed-forward: every seed's episode in lockstep, one batch a step
            fp32_returns = list(play_batched(t.env_id, fp32.fn, seeds, head=head,
                                             on_episode=log.hook("fp32"))[0])
        else:                     # recurrent: stepped with its state, reset per episode
            fp32_returns, _, _ = play(t.env_id, lambda o: output_to_action(fp32(o), space, head),
                                      seeds, log.hook("fp32"), on_start=fp32.reset)
        return fp32_returns, [output_to_action(q, space, head) for q in fp32.outputs(visited)]
    host = host_reference(t.model)
    actions = []
    for obs_k in visited:
        if t.stateful:
            host.reset()
        actions += [output_to_action(host.run([o])[0], space, head) for o in obs_k]
    return None, actions


def _result(t: HilPolicy, board: Board, scheme: str, seeds: list[int], on_board: dict,
            refs: dict, fp32_returns: list | None, fp32_actions: list, out_path: Path,
            log_path: Path) -> dict:
    """The HIL result (rows.HilResult's fields: the row schema), in the order it is written."""
    returns, board_actions = on_board["returns"], on_board["actions"]
    host_returns, host_actions = refs["tflite"]
    micro_returns, micro_actions = refs["micro"] if refs["micro"] is not None else (None, None)
    ref_actions = host_actions if micro_returns is None else micro_actions
    wall = on_board["wall"]
    return {
        "board": board.id,
        "scheme": scheme,
        "env": t.env_id,
        "episodes": len(seeds),
        "seeds": seeds,
        "returns": returns,
        "mean_return": mean_std(returns)[0],
        "std_return": mean_std(returns)[1],
        "host_interpreter": tflite_host.runtime_version(),    # e.g. "litert 2.3.0"
        "tflite_mean_return": mean_std(host_returns)[0],
        "tflite_std_return": mean_std(host_returns)[1],
        "micro_mean_return": mean_std(micro_returns)[0],
        "micro_std_return": mean_std(micro_returns)[1],
        "matches_reference": same_returns(returns, micro_returns if micro_returns is not None
                                          else host_returns),
        # the same action at every step of every episode (the reference's: TFLM, else
        # tflite-runtime), not only the same returns
        "actions_equal_reference": actions_equal(board_actions, ref_actions),
        "stateful": t.stateful,
        "fp32_mean_return": mean_std(fp32_returns)[0],
        "fp32_std_return": mean_std(fp32_returns)[1],
        "agreement": agreement(t.space, board_actions, fp32_actions),
        "agreement_with": "fp32" if fp32_returns is not None else "tflite-runtime",
        "action_head": t.action_head,
        "latency": latency_summary(on_board["costs"], on_board["unit"]),
        "steps_per_s": len(board_actions) / wall if wall > 0 else None,
        "energy": _energy(board, on_board["costs"], len(seeds)),
        "memory": on_board["memory"],
        "link": on_board["link"],   # what the link survived: retries, resyncs, bad frames, resets
        "results": str(out_path),
        "episodes_log": str(log_path),
        **({"act": on_board["act"]} if "act" in on_board else {}),
    }


def _energy(board: Board, costs: list[int], episodes: int) -> dict:
    """The energy estimate (measure/energy.py) of the mean step, and per episode: the sum of
    every step's estimate over the episodes played (replays not counted) / episodes."""
    e = energy(board, float(np.mean(costs)) if costs else None)
    if e["uj"] is not None:
        e["uj_per_episode"] = energy(board, float(np.sum(costs)) / episodes)["uj"]
    return e


def _write_results(results_dir: Path, board_id: str, scheme: str, result: dict, out_path: Path,
                   partial_log: Path, log_path: Path) -> None:
    """The result and its episode log under their seeds' names, then as the latest pair."""
    text = json.dumps(result, indent=2) + "\n"
    write_atomic(out_path, text)
    episodes = partial_log.read_text()
    with writing(log_path):
        partial_log.replace(log_path)
    with locked(results_dir):     # the latest pair (summary, log) comes from one run
        write_atomic(results_dir / f"hil_{board_id}_{scheme}.episodes.jsonl", episodes)
        write_atomic(results_dir / f"hil_{board_id}_{scheme}.json", text)


def _check_model_fits_env(model: Path, env, head: str, where) -> None:
    """The model's input against the env's observations and its outputs against the action
    head, before any board is built; a mismatch names both shapes."""
    check_env_fits_model(env.spec.id, model, where)
    outputs = tflite_runtime_interpreter(model).get_output_details()
    if len(outputs) != 1:
        raise QuarlError(f"{model}: HIL needs one output (the actions), the model has "
                         f"{len(outputs)}")
    n_out = int(np.prod(outputs[0]["shape"]))
    space = env.action_space
    want = int(space.n) if hasattr(space, "n") else int(np.prod(space.shape))
    if n_out != want:
        kind = f"{want} discrete actions" if hasattr(space, "n") else \
            f"actions of shape {tuple(space.shape)}"
        raise QuarlError(f"{model} gives {n_out} outputs; {env.spec.id} has {kind} "
                         f"(head {head})")
