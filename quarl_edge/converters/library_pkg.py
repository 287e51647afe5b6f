"""The files that make an exported policy folder (quarl_edge/converters/library.py's src/) a library for
each build system: Arduino (library.properties, examples/NAME_basic/NAME_basic.ino), PlatformIO
(library.json), CMake (CMakeLists.txt: `add_subdirectory` gives the static library NAME; under
ESP-IDF, ESP_PLATFORM set, the same file registers a component), Zephyr (zephyr/module.yml and
zephyr/CMakeLists.txt), and README.md. `facts` is what quarl_edge/measure/export.py knows of the
policy (name, env, board, action head, sizes, footprint, command)."""
from __future__ import annotations

import json

VERSION = "1.0.0"

# Kernels compute float results in TF Lite Micro's order: a compiler must not fuse a multiply
# and an add into one FMA (gcc does in its GNU modes on targets with FMA: ESP32, Cortex-M7, x86
# with -march=native). Every build file below passes it.
FP_FLAGS = ("-ffp-contract=off",)


def _cmake(name: str, sources: list[str]) -> str:
    srcs = "\n".join(f"    src/{s}" for s in sources if s.endswith(".c"))
    return f"""# {name}: a policy exported by quarl-edge. add_subdirectory(path/to/{name}) gives the static
# library `{name}` (target_link_libraries(app PRIVATE {name})); under ESP-IDF (ESP_PLATFORM) this
# file registers the folder as a component instead.
cmake_minimum_required(VERSION 3.13)

if(ESP_PLATFORM)
  idf_component_register(SRCS
{srcs}
    INCLUDE_DIRS src)
  target_compile_options(${{COMPONENT_LIB}} PRIVATE {' '.join(FP_FLAGS)})
  return()
endif()

if(CMAKE_SOURCE_DIR STREQUAL CMAKE_CURRENT_SOURCE_DIR)
  project({name} C)
endif()

add_library({name} STATIC
{srcs}
)
target_include_directories({name} PUBLIC ${{CMAKE_CURRENT_SOURCE_DIR}}/src)
set_target_properties({name} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options({name} PRIVATE {' '.join(FP_FLAGS)})
endif()
if(UNIX)
  target_link_libraries({name} PUBLIC m)
endif()
"""


def _zephyr(name: str, sources: list[str]) -> dict[str, str]:
    srcs = "\n".join(f"  ${{CMAKE_CURRENT_LIST_DIR}}/../src/{s}" for s in sources
                     if s.endswith(".c"))
    return {
        "zephyr/module.yml": f"name: {name}\nbuild:\n  cmake: zephyr\n",
        "zephyr/CMakeLists.txt": (
            f"# {name} as a Zephyr module (ZEPHYR_EXTRA_MODULES=path/to/{name}): a library linked "
            "into the app\n"
            f"zephyr_library_named({name})\nzephyr_library_sources(\n{srcs}\n)\n"
            f"zephyr_include_directories(${{CMAKE_CURRENT_LIST_DIR}}/../src)\n"
            f"zephyr_library_compile_options({' '.join(FP_FLAGS)})\n"),
    }


def _arduino(facts: dict) -> dict[str, str]:
    name = facts["name"]
    sentence = f"The {facts['env']} policy {name} (quarl-edge export): observation in, action out."
    props = (f"name={name}\nversion={VERSION}\nauthor=quarl-edge export\n"
             f"maintainer=quarl-edge export\nsentence={sentence}\n"
             f"paragraph=Bit-exact with TF Lite Micro; {name}_selftest() checks this build.\n"
             "category=Data Processing\nurl=https://github.com/quarl-edge/quarl-edge\n"
             f"architectures=*\nincludes={name}.h\n")
    ino = f"""// {name}_basic: the policy's self-test, then one action a second.
#include <{name}.h>

void setup() {{
  Serial.begin(9600);
  Serial.print("{name}_selftest: ");
  Serial.println({name}_selftest());   // 0: bit-exact with TF Lite Micro
  {name}_reset();                      // an episode starts
}}

void loop() {{
  float obs[{name}_OBS_SIZE] = {{0}};     // your sensors, in the env's order
  float action[{name}_ACTION_SIZE];
  if ({name}_act(obs, action) == 0) {{
    Serial.print("action: ");
    Serial.println(action[0], 6);
  }}
  delay(1000);
}}
"""
    pio = {"name": name, "version": VERSION, "description": sentence,
           "keywords": ["reinforcement-learning", "policy", "tflite-micro"],
           "frameworks": "*", "platforms": "*",
           "build": {"srcDir": "src", "includeDir": "src", "flags": list(FP_FLAGS)}}
    return {"library.properties": props,
            f"examples/{name}_basic/{name}_basic.ino": ino,
            "library.json": json.dumps(pio, indent=2) + "\n"}


def _action_text(facts: dict) -> str:
    name = facts["name"]
    if facts["action_head"] == "argmax":
        return (f"`action[0]` is the index of a Discrete({facts['n_actions']}) action "
                f"(start {facts['start']}): the argmax of the model's {facts['n_actions']} "
                "outputs, the first of equal ones, plus the start")
    bounds = f"low {facts['low']}, high {facts['high']}"
    how = ("the model's outputs clipped to the bounds" if facts["action_head"] == "identity" else
           "the model's outputs clipped to [-1, 1] and rescaled to the bounds "
           "(low + 0.5 (x + 1)(high - low), in double as numpy does in float64)")
    return f"`action[0..{name}_ACTION_SIZE-1]` are {how}: {bounds}"


def readme(facts: dict, sources: list[str]) -> str:
    name, fp = facts["name"], facts.get("footprint")
    i, o = facts["input"], facts["output"]
    foot = ("not measured (the board's compiler or size tool is not installed)" if not fp else
            f"{fp['text']} B text, {fp['data']} B data, {fp['bss']} B bss ({fp['compiler']}, "
            "the board's flags, linked alone with --gc-sections from the API): flash "
            f"{fp['text'] + fp['data']} B, static RAM {fp['data'] + fp['bss']} B (the arena is "
            f"{facts['arena_bytes']} B), the stack not measured here")
    in_q, out_q = (f", scale {t['scale']}, zero point {t['zero_point']}"
                   if t["dtype"] != "float32" else "" for t in (i, o))
    n_c = len([s for s in sources if s.endswith(".c")])
    rec = (f"yes: the state is kept between calls; call {name}_reset() when an episode starts"
           if facts["recurrent"] else "no")
    return f"""# {name}

The policy of `{facts['model']}` (sha256 {facts['sha256']}...) for **{facts['env']}**, exported
by quarl-edge for board `{facts['board']}` (kernels: {facts['kernels']}). Plain C99, no heap, no
stdio; every external symbol starts with `{name}`.

## API (`src/{name}.h`)

```c
#define {name}_OBS_SIZE {facts['obs_size']}
#define {name}_ACTION_SIZE {facts['action_size']}
#define {name}_ACTION_DISCRETE {1 if facts['action_head'] == 'argmax' else 0}
int  {name}_act(const float *obs, float *action); /* 0; -1 NaN in obs; -2 null pointer */
void {name}_reset(void);     /* an episode starts: recurrent state to zero */
int  {name}_selftest(void);  /* test vectors: outputs not bit-exact with TF Lite Micro (0) */
```

- observation: {facts['obs_size']} floats, exactly as `env.step` returns them (VecNormalize and
  its clip, if the run had them, are folded into the network). Model input: {i['dtype']}
  {i['shape']}{in_q}.
- action: {_action_text(facts)}. Model output: {o['dtype']} {o['shape']}{out_q}.
- recurrent: {rec}.
- ops: {', '.join(facts['ops'])}; {facts['weight_bytes']} B of weights, {facts['arena_bytes']} B
  arena.
- `{name}_selftest()` runs {facts['test_vectors']} embedded observations of a {facts['env']}
  episode (seed 0) and compares the outputs with TF Lite Micro's, bit for bit; it resets the
  state before and after.

Footprint of the library alone on {facts['board']}: {foot}.

## Build

Compile with `-ffp-contract=off` (the build files below pass it): the float kernels add in TF
Lite Micro's order, and a fused multiply-add would change the last bits.

- CMake: `add_subdirectory({name})`, then `target_link_libraries(app PRIVATE {name})`.
- ESP-IDF: put the folder in `components/`; the same CMakeLists.txt registers it.
- Arduino: copy the folder into `libraries/`; the example `{name}_basic` prints the self-test.
  On AVR the weights stay in flash (`__flash`) in the GNU C modes (Arduino's default).
- PlatformIO: `lib_deps = file://path/to/{name}` (library.json).
- Zephyr: `-DZEPHYR_EXTRA_MODULES=path/to/{name}` (zephyr/module.yml).
- Anything else: compile `src/*.c` ({n_c} files) with `src/` on the include path.

## Made by

```
{facts['command']}
```
"""


def package_files(facts: dict, sources: list[str]) -> dict[str, str]:
    """{path in the folder: text} of everything but src/."""
    name = facts["name"]
    files = {"CMakeLists.txt": _cmake(name, sources), **_zephyr(name, sources),
             **_arduino(facts), "README.md": readme(facts, sources)}
    return files
