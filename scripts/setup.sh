#!/usr/bin/env bash
# Installs everything quarl-edge needs on a Debian-like machine: system packages (via apt when run
# as root; otherwise prints the exact command), then a virtual environment in .venv with the
# pinned Python packages and quarl-edge itself (editable: firmware/ and boards/ are used where they
# are in the checkout; a non-editable `pip install .` carries them as package data instead).
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc builds the host board; the ARM/AVR toolchains and emulators serve the emulated boards.
APT_PACKAGES=(gcc libc6-dev make
              gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm    # boards/mps2-*, lm3s6965evb
              simavr gcc-avr avr-libc libsimavr-dev libsimavrparts1        # boards/atmega328p
              openocd avrdude teensy-loader-cli    # flash tools for the real boards (quarl_edge/targets/flash.py)
              openssh-client openssh-server        # linux boards' SSH deploy (tests: a local sshd)
              clang-19 libclang-rt-19-dev)         # the firmware's libFuzzer target (make fuzz, tests/test_fuzz.py)
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

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "setup: quarl-edge's pinned stack (TensorFlow 2.15, tflite-runtime 2.14) needs Python 3.11;" \
         "set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv || { echo "setup: python venv failed; as root: apt-get install -y python3-venv" >&2; exit 1; }
fi
.venv/bin/python -m pip install -q --upgrade "pip>=24" 2>&1 | grep -v "^WARNING: Location" || true
# mujoco (~26 MB wheel): the MuJoCo tasks and their tests (tests/test_mujoco.py skips without it).
# ray (the pinned ray==2.60.0 of the `ray` extra): `study --ray` and the board farm, tested on a
# local two-node cluster (tests/test_ray_farm.py).
# Built with pip's build isolation (pip fetches setuptools >= 77 for the build, see pyproject.toml),
# not --no-build-isolation: the venv's own setuptools (65.5 from ensurepip) is too old and is left
# alone, and this builds the same way as a user's `pip install`. Re-run after pulling changes that
# add packages (e.g. converters/ops/): the editable install records the package list it was made with.
.venv/bin/python -m pip install -q -e '.[test,mujoco,onnx,ray]' 2>&1 | grep -v "^WARNING: Location" || true
# MinAtar (the pixel tasks, quarl_edge/rl/minatar.py) without its declared dependencies: they
# would replace numpy 1.26 by numpy 2 (TensorFlow 2.15 cannot import it) and add seaborn and
# pandas for its GUI; its games need numpy only.
.venv/bin/python -m pip install -q --no-deps "MinAtar==1.0.15" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c 'import quarl_edge.cli, tensorflow, tf_agents, tflite_runtime, tflite_micro, ray, minatar' \
    2>/dev/null || { echo "setup: the Python packages did not install; see pip's output above" >&2; exit 1; }
echo "setup: ready (.venv)"
