"""TF-Agents policies saved by PolicySaver (or any TF SavedModel with the same `action`
signature): the greedy network rebuilt as a plain Keras MLP from the policy's variables.

The variables of TF-Agents' standard networks name their layers (QNetwork/EncodingNetwork/dense,
.../CategoricalProjectionNetwork/logits, .../NormalProjectionNetwork/means_projection_layer,
ActorNetwork/action, ...); the heads are:

    QNetwork                                   Q-values (argmax)
    ActorDistributionNetwork + Categorical...  logits (argmax)
    ActorDistributionNetwork + Normal...       tanh, scaled to the action bounds (TF-Agents'
                                               default mean_transform, tanh_squash_to_spec)
    ... + TanhNormalProjectionNetwork (SAC)    the first half of the projection (the means),
                                               tanh, scaled to the bounds
    ActorNetwork (DDPG, TD3)                   tanh (its action layer), scaled to the bounds

The hidden layers' activation is not in the variables (TF-Agents' default is relu): each of
relu and tanh is tried, and the import keeps the one whose actions equal the SavedModel's own
`action` signature (the source framework) on the fidelity observations, or fails.
A policy with state (an RNN policy: get_initial_state returns tensors) is refused until
recurrent policies are supported.

Loading a SavedModel runs its TensorFlow graph (not Python), and a graph can read and write
files, open sockets or call back into Python. So saved_model.pb is first parsed as a protobuf
(nothing runs) and `check_ops` reads every op of its graph and of every function of its
library: each must be in POLICY_OPS (the math of TF-Agents' policies, from the PolicySaver
outputs of every algorithm quarl-edge trains). Only the functions the SavedModel's saver names
(its checkpoint save and restore, which TensorFlow's TF2 loader does not run, and which nothing
else calls) may also hold the checkpoint ops of CHECKPOINT_OPS; a TF1 SavedModel (no object
graph), whose loader would run the restore, is refused. Anything else - WriteFile, ReadFile, PyFunc, a dataset,
a queue, an op of a custom library - is refused by name before tf.saved_model.load.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..core.errors import QuarlError
from ..core.nets import keras_mlp
from .bounded import MAX_WEIGHTS_BYTES, check_finite, read_file
from .common import (Imported, PolicyImportError, check_spaces, diagonal_scale, env_action,
                     fidelity, sha256)


# Every op type in the PolicySaver outputs of quarl-edge's DQN, PPO (categorical and normal),
# SAC, TD3 and DDPG runs and of a TF-Agents recurrent Q policy (refused later, for its state),
# and the few more a policy's math may use (Softmax, Sigmoid, Cast, Sub, ...). All pure math on
# tensors and the policy's own variables.
POLICY_OPS = frozenset("""
    Add AddV2 ArgMax AssignVariableOp BiasAdd BroadcastArgs BroadcastTo Cast ConcatV2 Const
    DisableCopyOnRead Equal Exp ExpandDims Fill GatherV2 Identity IdentityN MatMul Maximum Mean
    Minimum Mul NoOp OnesLike Pack PartitionedCall Placeholder Prod Range RealDiv ReadVariableOp
    Relu Reshape Select SelectV2 Shape Sigmoid Softmax Softplus Split Square Squeeze
    StatefulPartitionedCall StopGradient StridedSlice Sub Sum Tanh Transpose Unpack VarHandleOp
    ZerosLike
""".split())
# What a SavedModel's own checkpoint functions (its saver_def's save and restore) are made of.
CHECKPOINT_OPS = frozenset("""
    MergeV2Checkpoints RestoreV2 SaveV2 ShardedFilename StaticRegexFullMatch StringJoin
""".split())
# Named in the refusal: what reads or writes files, talks to the network or other processes,
# or calls Python (a partial list: anything not in POLICY_OPS is refused anyway).
DANGEROUS_OPS = frozenset("""
    WriteFile ReadFile MatchingFiles PyFunc PyFuncStateless EagerPyFunc ImmutableConst
    Print PrintV2 DebugIdentity DebugIdentityV2 DebugIdentityV3 WholeFileReader WholeFileReaderV2
    SaveV2 RestoreV2 Save Restore SaveSlices RestoreSlice MergeV2Checkpoints
    WriteSummary WriteScalarSummary CreateSummaryFileWriter
""".split())


def check_ops(path: Path) -> None:
    """Refuse a SavedModel whose graph or functions hold an op outside POLICY_OPS (see the
    module docstring), reading saved_model.pb only as a protobuf."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2
    sm = saved_model_pb2.SavedModel()
    try:
        sm.ParseFromString(read_file(path / "saved_model.pb", MAX_WEIGHTS_BYTES,
                                     "a saved_model.pb", PolicyImportError))
    except (DecodeError, OSError) as e:
        raise PolicyImportError(f"{path}: saved_model.pb is not a SavedModel ({e})") from None
    bad: dict[str, set[str]] = {}
    for mg in sm.meta_graphs:
        if not mg.object_graph_def.nodes:   # TF1: its loader runs the saver's restore op
            raise PolicyImportError(f"{path}: a TF1 SavedModel (no object graph); import takes TF2 "
                               "SavedModels (tf.saved_model.save, TF-Agents' PolicySaver)")
        graph = mg.graph_def
        functions = {f.signature.name: f for f in graph.library.function}

        def reachable(roots) -> set[str]:
            seen, todo = set(), [r for r in roots if r in functions]
            while todo:
                name = todo.pop()
                if name not in seen:
                    seen.add(name)
                    todo += [c for n in functions[name].node_def for c in _calls(n, functions)]
            return seen

        saver = {mg.saver_def.save_tensor_name.split(":")[0], mg.saver_def.restore_op_name}
        # what loading and calling the policy may run: every graph node but the saver's, and
        # every function the object graph holds (its methods and signatures)
        runs = reachable([c for n in graph.node if n.name not in saver for c in
                          _calls(n, functions)] + list(mg.object_graph_def.concrete_functions))
        checkpoint = reachable(c for n in graph.node if n.name in saver
                               for c in _calls(n, functions)) - runs
        for where, nodes, extra in (
                [("the graph", graph.node, frozenset())]
                + [(f"function {name}", f.node_def,
                    CHECKPOINT_OPS if name in checkpoint else frozenset())
                   for name, f in functions.items()]):
            for n in nodes:
                if n.op not in POLICY_OPS and n.op not in extra and n.op not in functions:
                    bad.setdefault(n.op, set()).add(where)
    if bad:
        named = sorted(bad, key=lambda op: (op not in DANGEROUS_OPS, op))
        first = named[0]
        raise PolicyImportError(
            f"{path}: refused: the SavedModel's graph holds the op{'s' if len(named) > 1 else ''}"
            f" {', '.join(named)} (e.g. {first} in {sorted(bad[first])[0]}), not the math of a "
            "policy (docs/import.md, on SavedModels, says what is allowed); nothing of it "
            "was run")


def _calls(node, functions) -> list[str]:
    """The functions a node calls: its op itself, or a function in its attributes (f of
    (Stateful)PartitionedCall, the branches of If/Case, ...)."""
    out = [node.op] if node.op in functions else []
    for a in node.attr.values():
        out += [a.func.name] if a.func.name else []
        out += [f.name for f in a.list.func]
    return out


def _load(path: Path):
    check_ops(path)
    import tensorflow as tf
    import tensorflow_probability  # noqa: F401  (registers the distributions' type specs)
    import tf_agents.policies  # noqa: F401      (and TF-Agents' own)
    try:
        return tf.saved_model.load(str(path))
    except (ValueError, OSError, tf.errors.OpError) as e:
        raise PolicyImportError(f"{path}: TensorFlow cannot load the SavedModel: "
                           f"{str(e).splitlines()[0]}") from None


def _layers(variables, where: str) -> tuple[str, list[tuple[str, np.ndarray, np.ndarray]]]:
    """(network kind, [(layer path, kernel, bias)]) in creation order."""
    by_layer: dict[str, dict] = {}
    for v in variables:
        m = re.fullmatch(r"(.+)/(kernel|bias):\d+", v.name)
        if not m:
            raise PolicyImportError(f"{where}: variable {v.name} is not a dense layer's kernel or bias "
                               "(only TF-Agents' MLP networks are supported)")
        by_layer.setdefault(m.group(1), {})[m.group(2)] = v.numpy()
        check_finite(v.name, by_layer[m.group(1)][m.group(2)], where, PolicyImportError)
    layers = []
    for name, kb in by_layer.items():
        if "kernel" not in kb or kb["kernel"].ndim != 2:
            raise PolicyImportError(f"{where}: layer {name} is not a dense layer")
        layers.append((name, kb["kernel"], kb.get("bias", np.zeros(kb["kernel"].shape[1],
                                                                  np.float32))))
    root = layers[0][0].split("/")[0] if layers else ""
    names = " ".join(n for n, _, _ in layers)
    if root.startswith("QNetwork"):
        kind = "q"
    elif root.startswith("ActorNetwork"):
        kind = "actor"
    elif "CategoricalProjectionNetwork" in names:
        kind = "categorical"
    elif "TanhNormalProjectionNetwork" in names:
        kind = "tanh-normal"
    elif "NormalProjectionNetwork" in names:
        kind = "normal"
    else:
        raise PolicyImportError(f"{where}: the network {root or '?'} is not one of TF-Agents' "
                           "QNetwork, ActorNetwork or ActorDistributionNetwork")
    if kind in ("normal", "categorical", "tanh-normal"):   # drop value nets saved alongside
        layers = [layer for layer in layers if "ValueNetwork" not in layer[0]
                  and "bias_layer" not in layer[0]]
    return kind, layers


def _network(kind, layers, act, action, where):
    hidden = [(k, b, act) for _, k, b in layers[:-1]]
    _, k, b = layers[-1]
    if kind in ("q", "categorical"):
        return hidden + [(k, b, "linear")]
    low, high = np.asarray(action["low"]), np.asarray(action["high"])
    if kind == "tanh-normal":    # the projection gives [means, stds]
        n = k.shape[1] // 2
        k, b = k[:, :n], b[:n]
    return hidden + [(k, b, "tanh"), diagonal_scale(low, high)]


def load(path: Path, env_id: str | None) -> Imported:
    import tensorflow as tf
    path = Path(path)
    if env_id is None:
        raise PolicyImportError(f"{path}: a SavedModel does not say its environment: give --env ID")
    policy = _load(path)
    if "action" not in policy.signatures:
        raise PolicyImportError(f"{path}: no `action` signature (not a TF-Agents PolicySaver "
                           f"policy); it has: {', '.join(policy.signatures) or 'none'}")
    if "get_initial_state" in policy.signatures:
        state = policy.signatures["get_initial_state"](batch_size=tf.constant(1))
        if state:
            raise PolicyImportError(f"{path}: the policy has state ({', '.join(state)}): a "
                               "recurrent policy, not supported yet")
    spec = policy.signatures["action"].structured_input_signature[1]
    obs_keys = [k for k in spec if k.endswith("observation")]
    if len(obs_keys) != 1:
        raise PolicyImportError(f"{path}: observations {sorted(k for k in spec if 'observation' in k)}"
                           ": one observation tensor is supported")
    obs_spec = spec[obs_keys[0]]
    obs_shape = tuple(int(d) for d in obs_spec.shape[1:])
    action = env_action(env_id)
    check_spaces(env_id, obs_shape, action, str(path))
    kind, layers = _layers(policy.model_variables, str(path))
    act_fn = policy.signatures["action"]

    def reference(obs):
        n = len(obs)
        out = act_fn(**{obs_keys[0]: tf.constant(np.asarray(obs, np.float32)),
                        **{k: tf.zeros((n,), s.dtype) for k, s in spec.items()
                           if k != obs_keys[0]}})
        return out["action"].numpy().reshape(n, -1)

    tried = []
    for act in ("relu", "tanh"):
        model = keras_mlp(obs_shape, _network(kind, layers, act, action, str(path)),
                          name="tf_agents_policy")
        imp = Imported(model=model, env_id=env_id, algo="tf-agents",
                       source={"kind": "tf-agents", "file": path.name, "sha256": sha256(path),
                               "network": kind, "variables": [n for n, _, _ in layers]},
                       reference=reference, reference_name="the SavedModel's action signature",
                       reference_gives="actions",
                       network={"type": "mlp", "hidden": [int(k.shape[1]) for _, k, _ in
                                                          layers[:-1]], "activation": act})
        try:
            imp.checked = fidelity(imp)
            return imp
        except QuarlError as e:
            tried.append(f"{act}: {e}")
    raise PolicyImportError(f"{path}: no activation makes the rebuilt network act as the saved policy "
                       f"(is it the greedy policy?): {'; '.join(tried)}")
