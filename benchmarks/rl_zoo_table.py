"""The RL Zoo table of benchmarks/rl_zoo.py (results/import/rl-zoo.md): what counts as the same
return (fp32 = SB3, SB3 in float64 against float32), the summary and per-agent tables, and the
notes under them, all from the rows of results/import/rl-zoo.jsonl."""
from __future__ import annotations

ALGOS = ("a2c", "ppo", "dqn", "qrdqn", "sac", "td3", "ddpg", "tqc", "trpo", "ars", "ppo_lstm")
ENVS = ("CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Acrobot-v1",
        "Pendulum-v1", "LunarLander-v2", "LunarLanderContinuous-v2", "BipedalWalker-v3",
        "BipedalWalkerHardcore-v3", "CarRacing-v0", "CarRacing-v1", "CarRacing-v2",
        "CarRacing-v3")
RTOL = 0.01                  # continuous actions: fp32 within 1 % of SB3's return per seed
# SB3 in float64 plays another episode than in float32 when their returns are more than 0.1 %
# apart (as tests/test_rl_zoo.py's robust_seeds): one episode rounded otherwise keeps its return
# to ~1e-6, and two episodes can end within RTOL of each other (a2c/LunarLanderContinuous-v2_1,
# seed 4: 199.1 in float32, 200.8 in float64, 402 and 385 steps)
ROUNDING_RTOL = 1e-3
# agents whose fp32 ≠ SB3 episode was traced step by step: a note each under the table's notes
TRACED = {
    "a2c/LunarLanderContinuous-v2_1": (
        "a2c/LunarLanderContinuous-v2_1, seed 4 (fp32 94.4, SB3 199.1), played step by step by "
        "both (issue 23): the same LunarLanderContinuous-v3 episode (observations identical "
        "through step 5) until float32 rounding shows in the actions, at step 3 (the side "
        "engine's 0.16098595 against SB3's 0.16098624, below its 0.5 threshold: no effect) and "
        "step 5 (-0.6062814 against -0.6062807: 7.2e-7, 12 float32 ulps, relative 1.2e-6; the "
        "side engine fires). Observations differ from step 6 (4e-8), by 1e-4 from step 31; from "
        "step 135 one side fires an engine the other does not; SB3 lands on the pad at step 402, "
        "the fp32 network off it (x = -0.44) at step 784, with twice the main-engine steps "
        "(619 against 313). SB3 in float64 parts from SB3 in float32 at the same steps (step 5: "
        "5.7e-7) and lands at step 385 (200.8: another episode, within 1 % by chance; its "
        "float64 actions rounded to float32 before each step: -42.5). SB3 "
        "itself, its step-5 side-engine action moved by +5 or -5 float32 ulps, returns 95.0 or "
        "71.3 (by ±1 or ±2 ulps 193.3 to 199.9, by +10/-10 109.3/-63.6, by +20/-20 59.9/197.4); "
        "the fp32 network played alone (a batch of 1, not the 5 seeds in lockstep) returns "
        "70.4, in numpy (keras_runner) 68.0 in lockstep and 184.1 alone. "
        "On SB3's 402 observations the fp32 network's outputs are within 3.5e-6 of SB3's in "
        "float64 (SB3 in float32: 1.4e-6), each within its float32 rounding bound; no "
        "normalised observation nears clip_obs (at most 4.3 of 10); SB3's actions replayed in "
        "quarl-edge's env return 199.1 exactly. Rounding, amplified by the env; not the import "
        "(benchmarks/rl_zoo_trace.py)."),
}


def same(x: float, y: float, discrete: bool) -> bool:
    """Two returns of one seed equal, as fp32 = SB3 counts them: exactly for discrete actions,
    within RTOL for continuous ones."""
    return x == y if discrete else abs(x - y) <= RTOL * abs(y)


def within(a: list[float], b: list[float], discrete: bool = False) -> int:
    """How many seeds' returns of `a` are the same as `b`'s (see same)."""
    return sum(same(x, y, discrete) for x, y in zip(a, b))


def also_differ(r: dict) -> int:
    """Of the seeds where the fp32 return is not SB3's, on how many SB3's own episode in
    float64 is another one than in float32 (rounding alone): returns more than ROUNDING_RTOL
    apart, not RTOL (within RTOL, two episodes may still be two)."""
    d = bool(r.get("discrete"))
    return sum(not same(f, s, d) and (x != s if d else abs(x - s) > ROUNDING_RTOL * abs(s))
               for f, s, x in zip(r["fp32_returns"], r["sb3_returns"], r["sb3_float64_returns"]))


def fp32_equals_sb3(fp32: list[float], sb3: list[float], discrete: bool) -> bool:
    if len(fp32) != len(sb3):
        return False
    if discrete:
        return all(a == b for a, b in zip(fp32, sb3))
    return all(abs(a - b) <= RTOL * abs(b) for a, b in zip(fp32, sb3))


def f1(x) -> str:
    return "—" if x is None else f"{x:.1f}"


def yes(x) -> str:
    return "—" if x is None else "yes" if x else "NO"


def same_as_tflm(b: dict) -> str:
    """yes, yes† (equal to TFLM played with a new env per seed, as the board was), NO, —."""
    if "equals_tflm" not in b:
        return "—"
    return "yes" if b["equals_tflm"] else "yes†" if b.get("equals_tflm_new_env") else "NO"


def table(rows: list[dict], algos, envs) -> str:
    head = ["algo", "env (played on)", "SB3 saved", "SB3", "fp32", "int8 TFLM", "int8 board",
            "board = TFLM", "fp32 = SB3", "instructions", "flash B", "RAM B", "microbit int8",
            "reason / note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        env = r["env"] if r.get("played_on") in (None, r["env"]) else \
            f"{r['env']} ({r['played_on']})"
        b = r.get("board") or {}
        s = r.get("small_board") or {}
        if s.get("status") == "ok":
            micro = f1(s["mean"]) + ("" if s.get("equals_tflm") else "†" if
                                     s.get("equals_tflm_new_env") else " (≠ TFLM)")
        else:
            micro = s.get("reason", "—")
        note = r.get("reason") or ""
        if r.get("sb3_error"):
            note = (note + "; " if note else "") + f"SB3 could not play it: {r['sb3_error']}"
        lines.append("| " + " | ".join([
            r["algo"], env, r.get("sb3_saved") or "—", f1(r.get("sb3_mean")), f1(r.get("fp32_mean")),
            f1(r.get("tflm_mean")) if "tflm_new_env_mean" not in r else
            f"{f1(r['tflm_new_env_mean'])}† ({f1(r['tflm_mean'])})", f1(b.get("mean")),
            same_as_tflm(b),
            yes(r.get("fp32_equals_sb3")),
            "—" if b.get("instructions_median") is None else f"{b['instructions_median']:,.0f}",
            "—" if b.get("flash_bytes") is None else f"{b['flash_bytes']:,}",
            "—" if b.get("ram_bytes") is None else f"{b['ram_bytes']:,}",
            micro.replace("|", "/"), note.replace("|", "/")]) + " |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> list[str]:
    algos = sorted({r["algo"] for r in rows}, key=lambda x: ALGOS.index(x) if x in ALGOS else 99)
    head = ["algo", "run folders", "imported", "refused", "failed after import", "bug", "absent",
            "% imported of present", "fp32 = SB3 (every seed)", "board = TFLM",
            "microbit: fits / does not fit", "microbit = TFLM"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def counts(rs, name):
        n = lambda st: sum(r["status"] == st for r in rs)  # noqa: E731
        present = len(rs) - n("absent")
        imported = [r for r in rs if r["status"] == "imported"]
        played = [r for r in imported if r.get("board")]
        with_sb3 = [r for r in played if r.get("fp32_equals_sb3") is not None]
        fits = sum((r.get("small_board") or {}).get("status") == "ok" for r in played)
        nofit = sum((r.get("small_board") or {}).get("status") == "does not fit" for r in played)
        small_same = sum(same_as_tflm(r["small_board"]).startswith("yes") for r in played
                         if (r.get("small_board") or {}).get("status") == "ok")
        return [name, str(len(rs)), str(len(imported)), str(n("refused")), str(n("failed")),
                str(n("bug")), str(n("absent")),
                f"{100 * len(imported) / present:.0f} %" if present else "—",
                f"{sum(bool(r['fp32_equals_sb3']) for r in with_sb3)} of {len(with_sb3)}",
                f"{sum(same_as_tflm(r['board']).startswith('yes') for r in played)} of "
                f"{len(played)}" + (f" ({dag} †)" if (dag := sum(
                    same_as_tflm(r['board']) == 'yes†' for r in played)) else ""),
                f"{fits} / {nofit}", f"{small_same} of {fits}"]
    for algo in algos:
        out.append("| " + " | ".join(counts([r for r in rows if r["algo"] == algo], algo)) + " |")
    out.append("| " + " | ".join(f"**{c}**" for c in counts(rows, "all")) + " |")
    return out


def header(rows: list[dict], zoo_commit: str, sb3: dict, folders_seen) -> list[str]:
    """The title, how the rows were made, and the summary table."""
    sb3_versions = sb3.get("versions") or {}
    sb3_seconds = sum(sb3.get("agents", {}).get(r["agent"], {}).get("seconds", 0) for r in rows)
    commands = list(dict.fromkeys(r["command"] for r in rows))
    dates = sorted({r["date"][:10] for r in rows}) or ["-"]
    episodes = sorted({r.get("episodes") for r in rows if r.get("episodes")})
    seconds = sum(r.get("seconds", 0) for r in rows)
    eps = "/".join(map(str, episodes))
    in_scope = set(folders_seen)
    scope = (f"all {len(in_scope)} classic-control and Box2D run folders" if
             in_scope <= {r["agent"] for r in rows} else
             f"{len(rows)} of its classic-control and Box2D run folders (those the command's "
             "--algos/--envs select)")
    return [
        "# The RL Baselines3 Zoo on a board",
        "",
        "Made by " + ", then ".join(f"`{c}`" for c in commands) +
        f" ({dates[0]}{'..' + dates[-1] if len(dates) > 1 else ''}; {seconds / 60:.0f} min of "
        "agent time on a loaded 2-core machine), from "
        f"[DLR-RM/rl-trained-agents](https://github.com/DLR-RM/rl-trained-agents) at commit "
        f"`{zoo_commit}` (MIT): {scope}, "
        f"{eps} episodes each (seeds 0..{max(episodes) - 1 if episodes else 0}). "
        "SB3's returns: " + ", ".join(f"{k} {v}" for k, v in sb3_versions.items()
                                      if k != "python") +
        f" in a side venv (`benchmarks/rl_zoo_sb3.py`, {sb3_seconds / 60:.0f} min); "
        "machine-readable rows with every "
        "seed's returns: `rl-zoo.jsonl`, SB3's: `rl-zoo.sb3.json`. Columns: see "
        "`benchmarks/rl_zoo.py`'s docstring; fp32 = SB3 is per seed, exactly for discrete "
        "actions, within 1 % for continuous ones; absent rows (the zip is listed by the commit "
        "but not in the stored snapshot of the repository) are not counted as present.",
        "",
        *summary(rows),
        "",
    ]


def note_paragraphs(rows: list[dict]) -> list[str]:
    """The paragraphs under the summary: what is missing, renamed, played otherwise, and
    where returns differ and why."""
    missing = [f"{al}" for al in ALGOS if not any(r["algo"] == al for r in rows)]
    notes = []
    if missing:
        notes.append(f"No run folder of {', '.join(missing)} for these envs at this commit.")
    if not any(r["env"].startswith("CarRacing") for r in rows):
        notes.append("No CarRacing agent at this commit.")
    renamed = sorted({f"{r['env']} -> {r['played_on']}" for r in rows
                      if r.get("played_on") and r["played_on"] != r["env"]})
    if renamed:
        notes.append("Retired ids are played on their successor, as quarl-edge maps them "
                     f"({', '.join(renamed)}), by SB3 and quarl-edge alike; the dynamics "
                     "may differ from those the agent was trained on.")
    if any("tflm_new_env_mean" in r for r in rows):
        notes.append("† TF Lite Micro played with a new env per seed, as the board's and the "
                     "fp32 network's (and SB3's) episodes are; `hil` plays TFLM's seeds one "
                     "after another in one env, whose return is in brackets. Gymnasium's "
                     "BipedalWalker keeps its Box2D world from one reset to the next (LunarLander "
                     "makes a new one), so reset(seed=k) after another episode is not the "
                     "episode a new env plays: the difference is the env's history, not the "
                     "board.")
    notes += rounding_paragraphs(rows)
    notb = [r for r in rows if r.get("board") and not same_as_tflm(r["board"]).startswith("yes")]
    if notb:
        notes.append("board ≠ TFLM: " + ", ".join(r["agent"] for r in notb) + ".")
    bugs = [r for r in rows if r["status"] == "bug"]
    if bugs:
        notes.append("**Bugs** (exceptions that are not quarl-edge errors): " +
                     "; ".join(f"{r['agent']}: {r['reason']}" for r in bugs))
    return notes


def rounding_paragraphs(rows: list[dict]) -> list[str]:
    """fp32 ≠ SB3 per agent (and how many of those seeds SB3 in float64 plays otherwise too),
    the traced agents, and SB3 in float64 against SB3 in float32."""
    notes = []
    differ = [r for r in rows if r.get("fp32_equals_sb3") is False]
    if differ:
        notes.append("fp32 ≠ SB3: " + "; ".join(
            f"{r['agent']} ({within(r['fp32_returns'], r['sb3_returns'], r.get('discrete'))}"
            f" of {len(r['sb3_returns'])} seeds "
            + ("equal, the import check's argmax agreement "
               f"{r['fidelity'].get('argmax_agreement', float('nan')):g}" if r.get("discrete")
               else "within 1 %, the import check's max abs action error "
               f"{r['fidelity'].get('max_abs_error_actions', float('nan')):.1e}")
            + (f"; on {also_differ(r)} of the "
               f"{len(r['sb3_returns']) - within(r['fp32_returns'], r['sb3_returns'], r.get('discrete'))}"
               " seeds where fp32 ≠ SB3, SB3 in float64 plays another episode than in "
               "float32 too (returns more than 0.1 % apart)"
               if r.get("sb3_float64_returns") else "") + ")"
            for r in differ) + ". A continuous policy's fp32 network (TensorFlow) differs from "
            "SB3's (torch) by float32 rounding, which is what the import check measures; "
            "where the env amplifies a difference of that size, the episode is another one.")
        notes += [TRACED[r["agent"]] for r in differ if r["agent"] in TRACED]
    rounding = [r for r in rows if r.get("sb3_float64_returns") and
                within(r["sb3_float64_returns"], r["sb3_returns"], r.get("discrete")) <
                len(r["sb3_returns"])]
    with64 = [r for r in rows if r.get("sb3_float64_returns")]
    if with64:
        notes.append(f"SB3 in float64 (`policy.double()` on float64 observations, the same "
                     f"seeds; `rl-zoo.sb3.json`'s returns_float64): of {len(with64)} agents SB3 "
                     f"plays, {len(with64) - len(rounding)} return what SB3 in float32 returns "
                     "(as fp32 = SB3 counts) on every seed" + (
                         "; not so " + ", ".join(
                             f"{r['agent']} ({within(r['sb3_float64_returns'], r['sb3_returns'], r.get('discrete'))}"
                             f" of {len(r['sb3_returns'])} seeds, mean "
                             f"{f1(r['sb3_float64_mean'])} against {f1(r['sb3_mean'])})"
                             for r in rounding) +
                         ": there, rounding alone (SB3 against itself) changes episodes, as "
                         "it does between the fp32 network (TensorFlow, float32) and SB3 "
                         "(torch, float32)" if rounding else "") + ".")
    return notes


def markdown(rows: list[dict], zoo_commit: str, sb3: dict, a, folders_seen) -> str:
    lines = header(rows, zoo_commit, sb3, folders_seen)
    for note in note_paragraphs(rows):     # one paragraph each
        lines += [note, ""]
    lines.append(table(rows, ALGOS, ENVS))
    return "\n".join(lines) + "\n"
