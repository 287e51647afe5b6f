# The two commands of the README: `make demo` (set up, then run the main job) and `make test`.
# PYTHON=python3.13 (or 3.12, or a path) chooses the interpreter and so the lock
# (requirements/py3.X.txt); VENV=DIR the venv (default .venv, made anew for another Python).
VENV ?= .venv
export PYTHON VENV
PY := $(VENV)/bin/python
QE := $(VENV)/bin/quarl-edge

.PHONY: setup demo demo-pretrained test test-long test-core test-slow ray-sim bench docs header wheel clean sb3-fixtures onnx-fixtures rl-zoo-table fuzz tflm-integration vs-tflm

setup:
	./scripts/setup.sh

demo: setup
	$(QE) demo

demo-pretrained: setup
	$(QE) demo --pretrained

# The suites run on TEST_JOBS pytest-xdist workers (default: one per core plus one: many tests
# wait on an emulator, a socket or a timeout, and two workers kept the 2-core machine only 89 %
# busy), a test file per worker at a time (--dist loadfile: a module's fixtures are built once),
# and print the 15 slowest tests. TEST_JOBS=0 runs them in this process.
TEST_JOBS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
XDIST = -n $(TEST_JOBS) --dist loadfile --durations=15

test: setup
	$(PY) -m pytest -q $(XDIST)

# The end-to-end runs `make test` leaves out to stay within its 15 minutes (marker `long`: study
# grids and Ray clusters through the CLI, emulated flashing, concurrent sessions); CI runs them.
test-long: setup
	$(PY) -m pytest -q $(XDIST) -m 'long and not slow and not sb3 and not userenv'

# The core suite: everything but the tests that train with TF-Agents (marker `train`), the
# `long` ones included; what CI runs on the second Python.
test-core: setup
	$(PY) -m pytest -q $(XDIST) -m 'not slow and not sb3 and not userenv and not train'

# Long runs: full training to the target return, long fuzzing (see docs/testing.md).
test-slow: setup
	$(PY) -m pytest -q -m slow

# The documentation site (README.md as its home page, docs/*.md; mkdocs.yml) in build/site, built
# with --strict: a broken link or anchor, or any other warning, fails it (tests/test_docs.py too).
docs: setup
	$(PY) -m mkdocs build --strict

# A simulated 4-node Ray farm on this machine (tests/test_ray_sim.py, marker slow): a head and four
# `quarl-edge farm-node` workers with fake CPU counts and board resources on some only, a small
# study on it and on the local pool, the same rows (docs/boards.md: Board farm on Ray).
ray-sim: setup
	$(PY) -m pytest -q -s -m slow tests/test_ray_sim.py

# The wheel `pip install .` builds (firmware/, boards/, the example run inside it as package data),
# in build/dist/. build/lib goes first: setuptools would ship files an earlier build left there.
wheel: setup
	rm -rf build/lib build/bdist.* build/dist
	$(PY) -m pip wheel -q --no-deps -w build/dist .
	@ls -l build/dist

# The Stable-Baselines3 fixtures of tests/test_import.py, remade with real SB3 and torch (a
# separate venv: torch is ~5 GB with its CUDA libraries, not a dependency of quarl-edge), and
# the optional test that checks the importer on a freshly trained one (pytest -m sb3).
sb3-fixtures: setup
	test -x .venv-sb3/bin/python || python3.11 -m venv .venv-sb3
	.venv-sb3/bin/python -m pip install -q "stable-baselines3==2.9.2" "numpy==1.26.4" \
	    "gymnasium==1.3.0" "box2d==2.3.10" "pygame==2.1.3" "onnx==1.17.0"
	.venv-sb3/bin/python tests/fixtures/sb3/make_fixtures.py

# The real-exporter ONNX fixtures of tests/test_import_onnx_export.py (issue 23), remade by
# torch.onnx.export in a side venv from the RL Zoo's agents: ZOO=a git mirror of
# DLR-RM/rl-trained-agents holding the commit named in tests/fixtures/onnx-export/SOURCE.md.
onnx-fixtures:
	test -n "$(ZOO)" || (echo "give ZOO=path/to/rl-trained-agents (a git mirror)"; exit 2)
	test -x .venv-onnx/bin/python || python3.11 -m venv .venv-onnx
	.venv-onnx/bin/python -m pip install -q "torch==2.13.0" "stable-baselines3==2.9.2" \
	    "gymnasium==1.3.0" onnx onnxscript
	.venv-onnx/bin/python tests/fixtures/onnx-export/make_fixtures.py --zoo $(ZOO)

# The RL Zoo table (results/import/rl-zoo.md and .jsonl, issue 23): every classic-control and
# Box2D agent of DLR-RM/rl-trained-agents imported, quantized and played on mps2-an386 and the
# micro:bit, beside SB3's own returns from a side venv (SB3_ZOO_VENV: torch 2.13.0, SB3 and
# sb3-contrib 2.9.2). ZOO=a git mirror (read at its HEAD, or ZOO_ARGS="--commit REV") or a
# checkout; ZOO_ARGS="--algos ppo --envs CartPole-v1 --episodes 2" runs a part. Resumable:
# agents already in the jsonl are skipped (ZOO_ARGS=--force redoes them). About 40 minutes.
SB3_ZOO_VENV ?= .venv-sb3zoo
rl-zoo-table: setup
	test -n "$(ZOO)" || (echo "give ZOO=path/to/rl-trained-agents (a git mirror or a checkout)"; exit 2)
	test -x $(SB3_ZOO_VENV)/bin/python || python3.11 -m venv $(SB3_ZOO_VENV)
	$(SB3_ZOO_VENV)/bin/python -m pip install -q "torch==2.13.0" "stable-baselines3==2.9.2" \
	    "sb3-contrib==2.9.2" "gymnasium==1.3.0" "box2d==2.3.10" pygame pyyaml
	$(PY) benchmarks/rl_zoo.py --zoo $(ZOO) --sb3-python $(SB3_ZOO_VENV)/bin/python $(ZOO_ARGS)

# The firmware's frame parser and dispatch under libFuzzer + ASan + UBSan, 10 million inputs
# (FUZZ_RUNS=N or FUZZ_SECONDS=S to change; `tests/fuzz/fuzz.py --variant stream` fuzzes one of the
# two firmwares); the corpus stays in build/fuzz. Measured on a busy 2-core machine: 14,600 inputs/s
# from the seeds, about 1,200 once the corpus has grown: plan over an hour, or run the two variants
# side by side.
FUZZ_RUNS ?= 10000000
fuzz: setup
	$(PY) tests/fuzz/fuzz.py $(if $(FUZZ_SECONDS),--seconds $(FUZZ_SECONDS),--runs $(FUZZ_RUNS))

header:
	$(PY) -m quarl_edge.link.protocol --header > firmware/core/qe_protocol.h

clean:
	rm -rf runs build .pytest_cache .hypothesis

# TF Lite Micro's seanet integration tests (127 int16 models with golden CSVs) on the host and
# mps2-an386 (issue 26): TFLM=a tflite-micro source checkout (the project never downloads it).
tflm-integration: setup
	test -n "$(TFLM)" || (echo "give TFLM=path/to/tflite-micro (a source checkout)"; exit 2)
	$(PY) benchmarks/tflm_integration.py --suite $(TFLM)/tensorflow/lite/micro/integration_tests/seanet \
	    --md results/tflm-integration/seanet.md $(if $(COMMIT),--commit $(COMMIT))

# TF Lite Micro (reference kernels, and with CMSIS-NN) beside our firmware on the same models on
# mps2-an386, same instruction counter (issue 26): source checkouts the user provides, nothing is
# downloaded. TFLM=tflite-micro, CMSIS_NN=CMSIS-NN, FLATBUFFERS=flatbuffers (the tag TFLM pins),
# GEMMLOWP=gemmlowp, RUY=ruy; optional CMSIS=CMSIS_6 and TINY=mlcommons/tiny (the kws model;
# without it VS_TFLM_MODELS defaults to cartpole,cnn). Needs arm-none-eabi C++ headers (Debian:
# libstdc++-arm-none-eabi-newlib). About 15 minutes on a busy 2-core machine (objects cached in
# build/vs-tflm).
VS_TFLM_ALL := cartpole,cnn,kws
VS_TFLM_NO_KWS := cartpole,cnn
VS_TFLM_MODELS ?= $(if $(TINY),$(VS_TFLM_ALL),$(VS_TFLM_NO_KWS))
vs-tflm: setup
	$(PY) benchmarks/vs_tflm.py $(if $(TFLM),--tflm-src $(TFLM)) $(if $(CMSIS_NN),--cmsis-nn-src $(CMSIS_NN)) \
	    $(if $(FLATBUFFERS),--flatbuffers-src $(FLATBUFFERS)) $(if $(GEMMLOWP),--gemmlowp-src $(GEMMLOWP)) \
	    $(if $(RUY),--ruy-src $(RUY)) $(if $(CMSIS),--cmsis-src $(CMSIS)) $(if $(TINY),--tiny-src $(TINY)) \
	    --models $(VS_TFLM_MODELS) --work build/vs-tflm --md results/bench/vs_tflm.md
