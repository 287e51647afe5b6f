# The two commands of the README: `make demo` (set up, then run the main job) and `make test`.
PY := .venv/bin/python
QE := .venv/bin/quarl-edge

.PHONY: setup demo demo-pretrained test test-slow bench header wheel clean

setup:
	./scripts/setup.sh

demo: setup
	$(QE) demo

demo-pretrained: setup
	$(QE) demo --pretrained

test: setup
	$(PY) -m pytest -q

# Long runs: full training to the target return, long fuzzing (see README).
test-slow: setup
	$(PY) -m pytest -q -m slow

# The wheel `pip install .` builds (firmware/, boards/, the example run inside it as package data),
# in build/dist/. build/lib goes first: setuptools would ship files an earlier build left there.
wheel: setup
	rm -rf build/lib build/bdist.* build/dist
	$(PY) -m pip wheel -q --no-deps -w build/dist .
	@ls -l build/dist

header:
	$(PY) -m quarl_edge.link.protocol --header > firmware/core/qe_protocol.h

clean:
	rm -rf runs build .pytest_cache .hypothesis
