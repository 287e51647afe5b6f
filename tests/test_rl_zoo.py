"""The RL Baselines3 Zoo's published agents import as users download them (issue 23).

tests/fixtures/rl-zoo/ holds seven of DLR-RM/rl-trained-agents' run folders as published (MIT,
LICENSE and SOURCE.md beside them): SB3 1.x zips whose spaces are plain JSON next to the
cloudpickle, a legacy-serialized policy.pth (sac/Pendulum-v1_1, also gSDE), VecNormalize runs
(ppo/MountainCar-v0_1, a2c/MountainCarContinuous-v0_1, also gSDE) and a retired env id
(ppo/LunarLander-v2_1), and a VecNormalize run whose env bounds let a normalised observation
pass clip_obs (a2c/LunarLanderContinuous-v2_1: the clip is a relu layer in the network).
expected/ALGO-ENV.npz holds real SB3 2.9.2's deterministic predictions
and greedy returns for each (make_expected.py, in a side venv with SB3 and torch); the tests
read them without torch. Retired ids, the legacy policy.pth, YAML and bad input:
test_rl_zoo_input.py."""
from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
from helpers_rl_zoo import AGENTS, CLIPPING, ROOT, ZOO, expected

from quarl_edge.importers import import_policy
from quarl_edge.importers.common import rounding_bound
from quarl_edge.core.envs import make_gym, outputs_to_actions, play_batched
from quarl_edge.core.nets import keras_runner, mlp_layers
from quarl_edge.core.run import load_keras, load_run


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Each zoo run folder imported once, as `quarl-edge import FOLDER/` does (no --env)."""
    base = tmp_path_factory.mktemp("zoo")
    runs = {}
    for folder in AGENTS:
        out = base / folder.replace("/", "-")
        import_policy(ZOO / folder, out)
        runs[folder] = out
    return runs


@pytest.mark.parametrize("folder", sorted(AGENTS))
def test_zoo_agent_acts_as_sb3_predict(imported, folder):
    info = load_run(imported[folder])
    assert info["env"] == AGENTS[folder] and info["fidelity"]["ok"]
    assert info["source"]["rl_zoo"]["run"] == folder.split("/")[1]
    exp = expected(folder)
    space = make_gym(AGENTS[folder]).action_space
    actions = outputs_to_actions(keras_runner(load_keras(imported[folder]))(exp["obs"]), space)
    if hasattr(space, "n"):
        assert np.array_equal(actions, exp["actions"])
    else:
        # within what float32 rounding of our network explains on each observation
        # (rounding_bound, as the import's check), plus 1e-5 for SB3's own float32 rounding
        model = load_keras(imported[folder])
        bound = rounding_bound(mlp_layers(model), exp["obs"]).reshape(actions.shape)
        err = np.abs(actions - exp["actions"].reshape(actions.shape))
        assert np.all(err <= np.maximum(1e-5, bound) + 1e-5), np.max(err)


def robust_seeds(exp) -> np.ndarray:
    """The seeds whose episode rounding alone does not change: all of them, or, where the
    fixture has SB3's returns with its policy in float64 too (returns_float64), those on which
    SB3's float64 and float32 returns agree within 0.1 % (an episode SB3 itself plays to
    another return when it only rounds differently is no test of an import)."""
    if "returns_float64" not in exp:
        return exp["seeds"]
    same = np.abs(exp["returns_float64"] - exp["returns"]) <= 1e-3 * np.abs(exp["returns"])
    return exp["seeds"][same]


@pytest.mark.parametrize("folder", sorted(AGENTS))
def test_zoo_agent_fp32_return_equals_sb3s(imported, folder):
    exp = expected(folder)
    seeds = robust_seeds(exp)
    assert len(seeds) >= 3, (exp["returns"], exp.get("returns_float64"))
    want = exp["returns"][np.searchsorted(exp["seeds"], seeds)]
    ours, _ = play_batched(AGENTS[folder], keras_runner(load_keras(imported[folder])),
                           seeds.tolist())
    if hasattr(make_gym(AGENTS[folder]).action_space, "n"):
        assert np.array_equal(np.asarray(ours), want), (ours, want)
    else:
        np.testing.assert_allclose(ours, want, rtol=0.01)


def test_what_run_json_says_about_the_zoo_agents(imported):
    lunar = load_run(imported["ppo/LunarLander-v2_1"])["source"]
    assert lunar["env_renamed"]["from"] == "LunarLander-v2"
    assert lunar["env_renamed"]["to"] == "LunarLander-v3"
    assert "dynamics may differ" in lunar["env_renamed"]["note"]
    assert lunar["version"] == "1.0rc0" and lunar["spaces_from"] == "the zip's JSON fields"
    sac = load_run(imported["sac/Pendulum-v1_1"])
    assert "gsde" in sac["source"] and sac["network"]["hidden"] == [64, 64]
    mc = load_run(imported["ppo/MountainCar-v0_1"])["source"]
    assert mc["vecnormalize"]["file"] == "vecnormalize.pkl"
    assert mc["rl_zoo"]["files"] == ["MountainCar-v0.zip", "MountainCar-v0/config.yml",
                                     "MountainCar-v0/args.yml", "MountainCar-v0/vecnormalize.pkl"]
    assert load_run(imported["ppo/MountainCar-v0_1"])["fidelity"]["clipped_observations"] == 0


def test_the_fidelity_record_compares_a_gaussian_mean_with_sb3s_mean(imported):
    """A Gaussian policy's network ends at its mean, which the head (like SB3's predict)
    clips to the bounds. run.json's max_abs_error_outputs compares the network with SB3's
    forward on the same quantity: it used to compare the unclipped mean with SB3's clipped
    action (8.86 here, 26.0 in the zoo's a2c/BipedalWalkerHardcore refusal) while the actions
    agreed to 4e-7."""
    fid = load_run(imported["a2c/MountainCarContinuous-v0_1"])["fidelity"]
    assert fid["max_abs_error_outputs"] <= 1e-5, fid
    assert fid["max_abs_error_actions"] <= 1e-5, fid


# ------------------------------------------------------------- VecNormalize's clip_obs
def _norm(rng, n, clip=10.0):
    return {"mean": rng.normal(0, 3, n), "var": rng.uniform(0.01, 4, n), "epsilon": 1e-8,
            "clip_obs": clip}


def test_the_clip_layer_computes_vecnormalizes_clip_then_the_first_layer():
    """relu(z) - relu(-z) - relu(z - c) + relu(-z - c) = clip(z, -c, c): the clip layer and the
    first layer against SB3's normalise-clip-Linear in float64, on values inside and beyond
    the clip (where the plain fold is wrong, so the comparison can tell the two apart)."""
    from quarl_edge.importers.vecnormalize import fold, fold_clipped
    from quarl_edge.core.nets import ACTIVATIONS
    rng = np.random.default_rng(0)
    n, c = 5, 2.5
    norm = _norm(rng, n, c)
    layers = [(rng.normal(size=(n, 7)), rng.normal(size=7), "tanh"),
              (rng.normal(size=(7, 2)), rng.normal(size=2), "linear")]
    s = np.sqrt(norm["var"] + norm["epsilon"])
    z = rng.uniform(-3 * c, 3 * c, size=(400, n))
    x = norm["mean"] + z * s
    want = np.tanh(np.clip(z, -c, c) @ layers[0][0] + layers[0][1]) @ layers[1][0] + layers[1][1]

    def run(ls):
        y = x
        for k, b, act in ls:
            y = ACTIVATIONS[act](y @ np.asarray(k, np.float64) + np.asarray(b, np.float64))
        return y
    clipped = fold_clipped(layers, norm, list(range(n)))
    assert [a for _, _, a in clipped] == ["relu", "tanh", "linear"]
    assert clipped[0][0].shape == (n, 4 * n) and clipped[1][0].shape == (4 * n, 7)
    np.testing.assert_allclose(run(clipped), want, rtol=0, atol=1e-4)   # float32 weights
    # the clip's two extra units only for the values whose clip is reachable: here 1 and 3
    z[:, [0, 2, 4]] = np.clip(z[:, [0, 2, 4]], -c, c)
    x = norm["mean"] + z * s
    want = np.tanh(np.clip(z, -c, c) @ layers[0][0] + layers[0][1]) @ layers[1][0] + layers[1][1]
    some = fold_clipped(layers, norm, [1, 3])
    assert some[0][0].shape == (n, 2 * n + 4)
    np.testing.assert_allclose(run(some), want, rtol=0, atol=1e-4)
    beyond = np.any(np.abs(z) > c, axis=1)
    assert beyond.sum() > 100
    assert np.max(np.abs(run(fold(layers, norm))[beyond] - want[beyond])) > 0.1
    inside = ~beyond
    np.testing.assert_allclose(run(fold(layers, norm))[inside], want[inside], atol=1e-4)


def test_the_clip_layer_is_added_where_the_env_bounds_can_pass_clip_obs():
    from quarl_edge.importers.vecnormalize import clip_reachable
    norm = {"mean": np.zeros(3), "var": np.ones(3), "epsilon": 0.0, "clip_obs": 5.0}
    assert clip_reachable(norm, [-5, -1, -4], [5, 1, 4]) == []       # |z| <= 5: never clipped
    assert clip_reachable(norm, [-5, -1, -6], [5, 1, 4]) == [2]
    assert clip_reachable(norm, [-np.inf, -1, -1], [1, 1, np.inf]) == [0, 2]
    assert clip_reachable(dict(norm, mean=np.array([0, 0, 3.0])), -4.0, 4.0) == [2]


def test_a_zoo_agent_reaching_the_clip_imports_with_a_clip_layer(imported):
    """a2c/LunarLanderContinuous-v2_1 was refused ("2 of 1000 observations reach VecNormalize's
    clip_obs"): the clip is now the network's first layer (relu), and SB3's predictions on
    observations beyond the clip (the fixture's last rows, beyond_clip in make_expected.py)
    are matched, within what float32 rounding explains."""
    info = load_run(imported[CLIPPING])
    vn = info["source"]["vecnormalize"]
    assert vn["folded_into"].startswith("a clip layer (relu)") and vn["clip_reachable"]
    assert info["fidelity"]["vecnormalize"] == vn["folded_into"]
    assert "clipped_observations" in info["fidelity"]
    model = load_keras(imported[CLIPPING])
    dense = [layer for layer in model.layers if layer.__class__.__name__ == "Dense"]
    assert dense[0].get_config()["activation"] == "relu"
    kernel = dense[0].get_weights()[0]
    assert kernel.shape == (8, 16 + 2 * len(vn["clip_reachable"]))
    assert dense[1].get_weights()[0].shape[0] == kernel.shape[1]
    exp = expected(CLIPPING)
    assert len(exp["obs"]) > 200          # observations beyond the clip, as SB3 acted on them
    s = np.sqrt(_vn_var(CLIPPING) + 1e-8)
    z = (exp["obs"][200:] - _vn_mean(CLIPPING)) / s
    assert np.all(np.any(np.abs(z) > 10.0, axis=1))
    ours = keras_runner(model)(exp["obs"][200:])
    space = make_gym(AGENTS[CLIPPING]).action_space
    np.testing.assert_allclose(outputs_to_actions(ours, space), exp["actions"][200:], atol=1e-4)


def _vn_attrs(folder):
    from quarl_edge.importers.vecnormalize import read_vecnormalize
    return read_vecnormalize(ZOO / folder / folder.split("/")[1].rsplit("_", 1)[0] /
                         "vecnormalize.pkl")


def _vn_mean(folder):
    return _vn_attrs(folder)["mean"]


def _vn_var(folder):
    return _vn_attrs(folder)["var"]


def test_the_clip_layer_plays_on_the_board_as_tflm(imported, tmp_path):
    """The clip layer (FULLY_CONNECTED with fused RELU) quantized to int8 and played on
    mps2-an386: every action as TF Lite Micro's."""
    import quarl_edge as qe
    run = tmp_path / "run"
    shutil.copytree(imported[CLIPPING], run)
    qe.quantize(run, ["int8"])
    res = qe.hil(run, "mps2-an386", scheme="int8", episodes=1)
    assert res.actions_equal_reference and res.matches_reference


# ------------------------------------------------------- the fidelity check's tolerance
def test_the_rounding_bound_covers_float32_and_is_tight_enough_to_see_a_defect():
    """rounding_bound against a real float32 forward (numpy float32) of a folded MLP with large
    mean / s (the cancellation that made a2c/BipedalWalkerHardcore-v3_1's actions differ by
    1.1e-5), in both forms (plain fold, clip layer): the error is within the bound, and the
    bound is below a 1e-3 defect."""
    from quarl_edge.importers.common import rounding_bound
    from quarl_edge.importers.vecnormalize import fold, fold_clipped
    rng = np.random.default_rng(1)
    n = 24
    norm = _norm(rng, n)
    norm["mean"] = rng.normal(0, 10, n)
    layers = [(rng.normal(0, 0.3, (n, 64)).astype(np.float32), rng.normal(0, .1, 64).astype(np.float32), "tanh"),
              (rng.normal(0, 0.2, (64, 64)).astype(np.float32), rng.normal(0, .1, 64).astype(np.float32), "tanh"),
              (rng.normal(0, 0.2, (64, 4)).astype(np.float32), rng.normal(0, .1, 4).astype(np.float32), "linear")]
    s = np.sqrt(norm["var"] + norm["epsilon"])
    x = (norm["mean"] + rng.uniform(-3, 3, (500, n)) * s).astype(np.float32)
    exact = x.astype(np.float64)
    z = np.clip((exact - norm["mean"]) / s, -10, 10)
    for k, b, act in layers:
        z = {"tanh": np.tanh, "linear": lambda v: v}[act](z @ k.astype(np.float64) + b)
    for folded in (fold(layers, norm), fold_clipped(layers, norm, list(range(n)))):
        y = x
        for k, b, act in folded:
            y = (y @ k + b).astype(np.float32)
            y = np.tanh(y) if act == "tanh" else np.maximum(y, 0) if act == "relu" else y
        err = np.abs(y.astype(np.float64) - z)
        bound = rounding_bound(folded, x)
        assert np.all(err <= bound), np.max(err / bound)
        assert np.max(err) > 1e-7 and np.max(bound) < 1e-3


def test_a_real_defect_is_still_refused(imported):
    """The tolerance is what float32 rounding explains for this network on each observation:
    one first-layer weight off by 1e-3, or an output bias off by 1e-3, is refused."""
    from quarl_edge.importers import rl_zoo
    from quarl_edge.importers.common import PolicyImportError, fidelity
    imp = rl_zoo.load(ZOO / CLIPPING, None)
    fid = fidelity(imp)
    assert fid["ok"] and fid["median_rounding_bound"] < 1e-3 and "rounding bound" in fid["tolerance"]
    dense = [layer for layer in imp.model.layers if layer.__class__.__name__ == "Dense"]
    first, out = dense[1], dense[-1]         # dense[0] is the clip layer
    k, b = first.get_weights()
    wrong_weight = k.copy()
    wrong_weight[3, 5] += 1e-3
    ko, bo = out.get_weights()
    for layer, weights, right in ((first, [wrong_weight, b], [k, b]),
                                  (out, [ko, bo + np.float32(1e-3)], [ko, bo])):
        layer.set_weights(weights)
        with pytest.raises(PolicyImportError, match="does not act as the source does"):
            fidelity(imp)
        layer.set_weights(right)
    assert fidelity(imp)["ok"]


def test_zoo_table_counts_a_seed_sb3_itself_plays_otherwise_in_float64(imported):
    """rl-zoo.md's note on an agent whose fp32 return is not SB3's counts the seeds where SB3
    in float64 plays another episode than SB3 in float32. a2c/LunarLanderContinuous-v2_1's
    seed 4 is one (issue 23: 199.1 in float32, 200.8 in float64, 402 and 385 steps: the same
    step-5 action 9.6 float32 ulps apart), though its two returns are within 1 %: the note
    must not call the fp32 network's other episode there (94.4) unexplained. Every seed where
    the fp32 return is not SB3's is one where SB3's float64 and float32 episodes differ."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import rl_zoo_table                 # benchmarks/rl_zoo.py's table
    exp = expected(CLIPPING)
    ours, _ = play_batched(AGENTS[CLIPPING], keras_runner(load_keras(imported[CLIPPING])),
                           exp["seeds"].tolist())
    row = {"fp32_returns": list(ours), "sb3_returns": exp["returns"].tolist(),
           "sb3_float64_returns": exp["returns_float64"].tolist(), "discrete": False}
    differ = len(ours) - rl_zoo_table.within(row["fp32_returns"], row["sb3_returns"])
    assert rl_zoo_table.also_differ(row) == differ, (ours, exp["returns"], exp["returns_float64"])
    # the committed row (fp32 94.4 on seed 4, through hil's Keras call): its one seed counted
    rows = {r["agent"]: r for r in map(json.loads, (ROOT / "results" / "import" /
                                                     "rl-zoo.jsonl").read_text().splitlines())}
    assert rl_zoo_table.also_differ(rows[CLIPPING]) == 1
