"""The API of an exported policy library: NAME.h and NAME.c (see quarl_edge/converters/library.py).

    int  NAME_act(const float *obs, float *action);
    void NAME_reset(void);
    int  NAME_selftest(void);

NAME_act is the whole policy, the host's own mapping done in C with the same float operations:
the observation becomes the model's input (an integer input: round half to even of x / scale,
plus the zero point, saturated, as measure/reference.py's _quantized), the model runs, its
output is read (an integer output: (q - zero point) * scale in float32, as _dequantized), and
the action is what core/envs/__init__.py:outputs_to_actions makes of it: argmax (the first largest,
plus the space's start), identity (clipped to the bounds) or scale (low + 0.5 * (x + 1) *
(high - low) in double, as numpy computes it in float64, then clipped and rounded to float).
VecNormalize and its clip are not here: the importers fold them into the network.

NAME_selftest runs the embedded test vectors (inputs and TF Lite Micro's outputs, as raw tensor
bytes) from a reset state and returns the number of output elements that differ in any bit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .emit import c_float
from .spec import GeneratedModel
from .tensor import TensorSpec

HEADS = ("argmax", "identity", "scale")
API_HEADER = "@API_HEADER@"   # the wrapper's #include of NAME.h, filled in after the rename


@dataclass
class Policy:
    """How outputs become actions: the run's action head and the env's action space."""
    action_head: str                  # argmax | identity | scale
    n_actions: int                    # argmax: the number of discrete actions
    start: int = 0                    # argmax: the Discrete space's start
    low: list[float] = field(default_factory=list)    # Box: bounds, float32 values
    high: list[float] = field(default_factory=list)

    @property
    def action_size(self) -> int:
        return 1 if self.action_head == "argmax" else len(self.low)


def header(name: str, obs_size: int, policy: Policy, doc: str) -> str:
    """NAME.h in our qe_ spelling (library.prefixed renames it)."""
    g = "QE_POLICY_API_H_"
    discrete = 1 if policy.action_head == "argmax" else 0
    name_ = name
    name = "qe"
    return f"""/* {name_}: a policy exported by quarl-edge ({doc}).
 * Every external symbol of this library starts with {name}; no heap, no stdio. */
#ifndef {g}
#define {g}

#define {name}_OBS_SIZE {obs_size}        /* floats per observation, in the env's order */
#define {name}_ACTION_SIZE {policy.action_size}     /* floats {name}_act writes */
#define {name}_ACTION_DISCRETE {discrete}  /* 1: action[0] holds the index of a Discrete action */

#ifdef __cplusplus
extern "C" {{
#endif

/* The policy: an observation exactly as env.step returns it (as floats) -> the action exactly
 * as env.step takes it. 0, or < 0: -1 a NaN in obs (nothing run), -2 a null pointer. */
int {name}_act(const float *obs, float *action);

/* An episode starts: the recurrent state (if any) to zero. */
void {name}_reset(void);

/* Runs the embedded test vectors from a reset state (and resets after): the number of output
 * values not bit-exact with TF Lite Micro's. 0: this build computes what was measured. */
int {name}_selftest(void);

#ifdef __cplusplus
}}
#endif

#endif /* {g} */
"""


def _bytes_array(name: str, data: bytes) -> str:
    vals = [f"0x{b:02x}u" for b in data] or ["0u"]
    rows = ["    " + ", ".join(vals[i:i + 12]) + "," for i in range(0, len(vals), 12)]
    return (f"static const QE_FLASH uint8_t {name}[{len(vals)}] = {{\n" + "\n".join(rows)
            + "\n};\n")


def _floats(values) -> str:
    out = []
    for v in values:
        f = float(np.float32(v))
        out.append("INFINITY" if f == np.inf else "-INFINITY" if f == -np.inf else c_float(f))
    return ", ".join(out)


def _input_c(spec: TensorSpec, off: int) -> str:
    if spec.dtype == "float32":
        return (f"        memcpy(qe_arena + {off}u + 4u * i, &obs[i], 4u);\n")
    lo, hi = (-128, 127) if spec.dtype == "int8" else (-32768, 32767)
    ctype = "int8_t" if spec.dtype == "int8" else "int16_t"
    return (f"        const {ctype} q = ({ctype})qe_quantize_input(obs[i], {c_float(spec.scale)}, "
            f"{spec.zero_point}.0f, {lo}.0f, {hi}.0f);\n"
            f"        memcpy(qe_arena + {off}u + sizeof q * i, &q, sizeof q);\n")


QUANTIZE_C = """/* measure/reference.py's _quantized: clip(round_half_even(x / scale) + zero, lo, hi) in float */
static long qe_quantize_input(float x, float scale, float zero, float lo, float hi)
{
    float q = x / scale;
    float r;
    long t;
    if (q > 1.0e7f) {
        q = 1.0e7f;
    } else if (q < -1.0e7f) {
        q = -1.0e7f;
    }
    t = (long)q;                      /* toward zero; exact below 2^24 */
    r = q - (float)t;
    if (r > 0.5f || (r == 0.5f && (t & 1L) != 0L)) {
        t += 1L;
    } else if (r < -0.5f || (r == -0.5f && (t & 1L) != 0L)) {
        t -= 1L;
    }
    r = (float)t + zero;
    return (long)(r < lo ? lo : (r > hi ? hi : r));
}
"""


def _output_c(spec: TensorSpec, off: int) -> str:
    """static float qe_output(i): output element i as float32, dequantized."""
    if spec.dtype == "float32":
        body = f"    float y;\n    memcpy(&y, qe_arena + {off}u + 4u * i, 4u);\n    return y;\n"
    else:
        ctype = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t"}[spec.dtype]
        body = (f"    {ctype} q;\n    memcpy(&q, qe_arena + {off}u + sizeof q * i, sizeof q);\n"
                f"    return ((float)q - {float(spec.zero_point)!r}f) * {c_float(spec.scale)};\n")
    return f"static float qe_output(uint32_t i)\n{{\n{body}}}\n"


def _action_c(policy: Policy, n_out: int) -> str:
    """The body that turns qe_output(0..n_out-1) into action[]."""
    if policy.action_head == "argmax":
        return (f"    best = qe_output(0u);\n    for (i = 1u; i < {n_out}u; ++i) {{\n"
                "        const float y = qe_output(i);\n        if (y > best) {\n"
                "            best = y;\n            arg = i;\n        }\n    }\n"
                f"    action[0] = (float)((long)arg + {policy.start}L);\n")
    clip = ("        action[i] = (float)(v < (double)qe_low[i] ? (double)qe_low[i]\n"
            "                            : (v > (double)qe_high[i] ? (double)qe_high[i] : v));\n")
    if policy.action_head == "identity":
        return (f"    for (i = 0u; i < {n_out}u; ++i) {{\n"
                "        const double v = (double)qe_output(i);\n" + clip + "    }\n")
    return (f"    for (i = 0u; i < {n_out}u; ++i) {{\n        double t = (double)qe_output(i);\n"
            "        double v;\n        t = t < -1.0 ? -1.0 : (t > 1.0 ? 1.0 : t);\n"
            "        v = (double)qe_low[i] + 0.5 * (t + 1.0) * (double)qe_span[i];\n"
            + clip + "    }\n")


def wrapper(name: str, gm: GeneratedModel, policy: Policy, stateful: bool,
            vectors: list[tuple[bytes, bytes]]) -> str:
    """NAME.c in our qe_ spelling (library.prefixed renames it with the rest)."""
    ins, outs = gm.inputs[0], gm.outputs[0]
    in_off, out_off = gm.input_offsets[0], gm.output_offsets[0]
    n_obs, n_out = int(np.prod(ins.shape)), int(np.prod(outs.shape))
    L = [f'/* The policy around the model: see {name}.h. Generated by quarl-edge export. */',
         "#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n",
         f'#include "{API_HEADER}"\n#include "qe_model.h"\n']
    if policy.action_head != "argmax":
        L.append(f"static const float qe_low[{n_out}] = {{ {_floats(policy.low)} }};")
        L.append(f"static const float qe_high[{n_out}] = {{ {_floats(policy.high)} }};")
        if policy.action_head == "scale":
            span = (np.asarray(policy.high, np.float32) - np.asarray(policy.low, np.float32))
            L.append(f"static const float qe_span[{n_out}] = {{ {_floats(span)} }};  "
                     "/* high - low in float32, as numpy */")
        L.append("")
    if ins.dtype != "float32":
        L.append(QUANTIZE_C)
    L.append(_output_c(outs, out_off))
    L.append("int qe_act(const float *obs, float *action)\n{\n    uint32_t i;")
    if policy.action_head == "argmax":
        L.append("    uint32_t arg = 0u;\n    float best;")
    L.append("    if (obs == NULL || action == NULL) {\n        return -2;\n    }\n"
             f"    for (i = 0u; i < {n_obs}u; ++i) {{\n        if (isnan(obs[i])) {{\n"
             "            return -1;\n        }\n    }\n"
             f"    for (i = 0u; i < {n_obs}u; ++i) {{\n{_input_c(ins, in_off)}    }}\n"
             "    qe_model_invoke();")
    L.append(_action_c(policy, n_out) + "    return 0;\n}\n")
    L.append("void qe_reset(void)\n{\n"
             + ("    qe_model_reset_state();\n" if stateful else "")
             + "}\n")
    L.append(_selftest_c(name, vectors, ins, outs, in_off, out_off))
    return "\n".join(L)


def _selftest_c(name: str, vectors, ins: TensorSpec, outs: TensorSpec, in_off: int,
                out_off: int) -> str:
    esz = outs.nbytes // max(1, int(np.prod(outs.shape)))
    L = [f"/* ---- test vectors: {len(vectors)} model inputs and TF Lite Micro's outputs, as the "
         "tensors' bytes */"]
    L.append(_bytes_array("qe_test_inputs", b"".join(v[0] for v in vectors)))
    L.append(_bytes_array("qe_test_outputs", b"".join(v[1] for v in vectors)))
    L.append("int qe_selftest(void)\n{\n    uint32_t v, i, b;\n    int bad = 0;\n"
             "    qe_reset();\n"
             f"    for (v = 0u; v < {len(vectors)}u; ++v) {{\n"
             f"        for (i = 0u; i < {ins.nbytes}u; ++i) {{\n"
             f"            qe_arena[{in_off}u + i] = qe_test_inputs[v * {ins.nbytes}u + i];\n"
             "        }\n        qe_model_invoke();\n"
             f"        for (i = 0u; i < {outs.nbytes}u; i += {esz}u) {{\n"
             "            int differs = 0;\n"
             f"            for (b = 0u; b < {esz}u; ++b) {{\n"
             f"                differs |= qe_arena[{out_off}u + i + b] != "
             f"qe_test_outputs[v * {outs.nbytes}u + i + b];\n"
             "            }\n            bad += differs;\n        }\n    }\n"
             "    qe_reset();\n    return bad;\n}\n")
    return "\n".join(L)
