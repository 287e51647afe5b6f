#!/usr/bin/env bash
# Installs everything quarl-edge needs on a Debian-like machine: system packages (via apt when run
# as root; otherwise prints the exact command), then a virtual environment in .venv with the
# pinned Python packages and quarl-edge itself (editable: firmware/ and boards/ are used where they
# are in the checkout; a non-editable `pip install .` carries them as package data instead).
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc builds the host board; the ARM/AVR/RISC-V toolchains and emulators serve the emulated boards.
APT_PACKAGES=(gcc libc6-dev make
              gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm    # boards/mps2-*, lm3s6965evb
              simavr gcc-avr avr-libc libsimavr-dev libsimavrparts1        # boards/atmega328p
              gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf qemu-system-misc   # boards/hifive1
              openocd avrdude teensy-loader-cli    # flash tools for the real boards (quarl_edge/targets/flash.py)
              arduino-core-avr gdb-multiarch       # quarl-edge emulate: Optiboot's source, the gdb flasher
              openssh-client openssh-server        # linux boards' SSH deploy (tests: a local sshd)
              clang-19 libclang-rt-19-dev          # the firmware's libFuzzer target (make fuzz, tests/test_fuzz.py)
              cmake g++ arduino-core-avr)          # `export`'s library as users build it (tests/test_export.py)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" = 0 ]; then
        echo "setup: installing system packages: ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    else
        echo "setup: missing system packages; run as root:" >&2
        echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
fi

# The interpreter: $PYTHON (a command on the PATH or a path; default python3). A version that
# pyenv has but that is not on the PATH (`python3.13` with only 3.11 global) is found in pyenv's
# versions. Supported: 3.11, 3.12, 3.13, each with its own lock, requirements/py3.X.txt.
# (A pyenv shim is on the PATH for every version pyenv has, but runs only the global ones: so
# the test is whether it runs.)
PYTHON=${PYTHON:-python3}
runs() { "$1" -c 'import sys' >/dev/null 2>&1; }
if ! runs "$PYTHON"; then
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/"$PYTHON"; do
        runs "$candidate" && PYTHON=$candidate && break
    done
fi
if ! runs "$PYTHON"; then
    echo "setup: no Python interpreter '$PYTHON'; set PYTHON to python3.11, python3.12 or" \
         "python3.13 (a command or a path)" >&2
    exit 1
fi
PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
LOCK=requirements/py$PYVER.txt
if [ ! -f "$LOCK" ]; then
    echo "setup: $PYTHON is Python $PYVER; quarl-edge supports 3.11, 3.12 and 3.13" \
         "(requirements/py3.X.txt); set PYTHON to one of them" >&2
    exit 1
fi

# One venv, $VENV (default .venv), made with that Python; one made with another Python is made
# anew (say PYTHON=python3.13 VENV=.venv-3.13 to keep both).
VENV=${VENV:-.venv}
if [ -x "$VENV/bin/python" ] && [ "$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$PYVER" ]; then
    echo "setup: $VENV has another Python; making it anew with Python $PYVER"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV" || { echo "setup: python venv failed; as root: apt-get install -y python3-venv" >&2; exit 1; }
fi
quiet() { grep -v "^WARNING: Location" || true; }

# The lock holds every package at its exact version, what the tests ran with: installed with
# --no-deps, so that pip neither resolves again nor takes in TF-Agents' 2023 pins (on 3.12+,
# tf-agents 0.19 and gym 0.23 run on TensorFlow 2.21 without them; pyproject.toml's `train`
# extra says why). It is installed again only when it changed (its hash is kept in the venv).
stamp="$(sha256sum "$LOCK" pyproject.toml | sha256sum | cut -c1-16)"
if [ "$(cat "$VENV/.quarl-edge-lock" 2>/dev/null)" != "$stamp" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade "pip>=24" 2>&1 | quiet
    "$VENV/bin/python" -m pip install -q --no-deps -r "$LOCK" 2>&1 | quiet
    # quarl-edge itself, editable (firmware/ and boards/ are used where they are in the
    # checkout). Built with pip's build isolation (setuptools >= 77 for the build, see
    # pyproject.toml). Re-run after pulling changes that add packages (e.g. quarl_edge/converters/ops/).
    "$VENV/bin/python" -m pip install -q --no-deps -e . 2>&1 | quiet
    echo "$stamp" > "$VENV/.quarl-edge-lock"
fi
"$VENV/bin/python" -c 'import quarl_edge.cli, tensorflow, tf_agents, tflite_micro, ray, minatar; from quarl_edge.core import tflite_host; tflite_host.interpreter_module()' \
    2>/dev/null || { rm -f "$VENV/.quarl-edge-lock"; echo "setup: the Python packages did not install; see pip's output above" >&2; exit 1; }
echo "setup: ready ($VENV, Python $PYVER, $LOCK)"
