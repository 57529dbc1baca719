#!/usr/bin/env bash
# bench/gpu/prepare_wheels.sh: the wheels the H200 session must carry, built/downloaded HERE
# (the device machine has no network), following /work/.library/device/README.md's `.whl`
# notes. Run it from a checkout with the dev venv (`make test` made it), right before the GPU
# calls, so dsguard's own wheel is the tree the calls run:
#
#     bash bench/gpu/prepare_wheels.sh            # fills .whl/ (git-ignored), ~20 MB
#
# What the image lacks or has in another version (KINDS.md: Python 3.12, torch 2.11 cu130,
# transformers 5.17, accelerate 1.15, nvidia-ml-py, psutil, PyYAML, ninja, einops, msgpack,
# py-cpuinfo, tqdm, matplotlib present; no pydantic, hjson, structlog, tenacity, DeepSpeed):
#   - DeepSpeed 0.19.8 built here with DS_BUILD_OPS=0 (py3-none-any; ops JIT-build there)
#   - dsguard (this tree)
#   - transformers 5.23.0, peft 0.21.2: the versions dsguard's trainer and ZeRO transplant
#     are tested with here (transformers 5.23 needs regex >= 2025.10.22 at import: carried)
#   - pydantic + pydantic-core (cp312 binary) + annotated-types + typing-inspection +
#     typing-extensions (pydantic-core needs >= 4.16), hjson (DeepSpeed), structlog and
#     tenacity and msgspec (dsguard)
# Versions are this venv's, so the GPU runs what was tested on the CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
W=.whl
if ! git check-ignore -q .whl/x.whl 2>/dev/null; then  # .gitignore already lists .whl/
    ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"; echo '/.whl/' >> "$ex"
fi
rm -rf "$W"
mkdir -p "$W"

ver() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }

# 1. DeepSpeed without prebuilt ops (setup.py imports torch: the venv's, no build isolation)
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$W" \
    "deepspeed==$(ver deepspeed)"

# 2. dsguard itself, from this tree (built from a copy: no build/ or egg-info left here)
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r pyproject.toml README.md src "$src/"
rm -rf "$src"/src/*.egg-info
find "$src" -name __pycache__ -prune -exec rm -rf {} +
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$W" "$src"

# 3. the rest, as the device README says (binary where needed, cp312 manylinux)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$W" \
    "transformers==$(ver transformers)" "peft==$(ver peft)" "regex==$(ver regex)" \
    "pydantic==$(ver pydantic)" "pydantic-core==$(ver pydantic-core)" \
    "annotated-types==$(ver annotated-types)" "typing-inspection==$(ver typing-inspection)" \
    "typing-extensions==$(ver typing-extensions)" "hjson==$(ver hjson)" \
    "structlog==$(ver structlog)" "tenacity==$(ver tenacity)" "msgspec==$(ver msgspec)"

ls -la "$W"
du -sh "$W"
# one version of each package (two stop the whole install there)
dups=$(ls "$W" | sed -E 's/-[0-9].*//' | tr 'A-Z-' 'a-z_' | sort | uniq -d)
if [ -n "$dups" ]; then echo "duplicate wheels: $dups" >&2; exit 1; fi

cat <<'EOF'

Device calls (tool `run`, carry [".whl"], timeout_s 600), back to back (the machine stays
warm 30 s after a call; a cold one costs a start and the install again, which each call does):

1) micro_batch, gradient_checkpointing, build_failure (+ doctor):
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; export PYTHONUNBUFFERED=1; python3 -m dsguard doctor --json > $OUT/doctor.json 2>&1; nvidia-smi > $OUT/nvidia-smi.txt 2>&1; python3 -m bench.gpu.run --scenarios micro_batch gradient_checkpointing build_failure --no-sweep --deadline-s 500 --out /tmp/gb/p1 --export $OUT 2>&1 | tee $OUT/console.txt

2) zero3, lora:
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; export PYTHONUNBUFFERED=1; python3 -m bench.gpu.run --scenarios zero3 lora --no-sweep --deadline-s 520 --out /tmp/gb/p2 --export $OUT 2>&1 | tee $OUT/console.txt

3) offload + the throughput sweep:
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; export PYTHONUNBUFFERED=1; python3 -m bench.gpu.run --scenarios offload --sweep --deadline-s 520 --out /tmp/gb/p3 --export $OUT 2>&1 | tee $OUT/console.txt

After each call, keep its files (files_at/summary.json, summary.md, results.tar.gz,
memory_throughput.png, console.txt); then merge the three parts here:
.venv/bin/python -m bench.gpu.run --report p1/summary.json p2/summary.json p3/summary.json --out bench/gpu/h200
EOF
