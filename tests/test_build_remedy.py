"""Real DeepSpeed JIT build failures, classified, remedied, and healed on this CPU machine.

The failures are made, not simulated: HF Trainer + DeepSpeed ZeRO-2 with an ``AdamW``
optimizer block makes DeepSpeed construct ``DeepSpeedCPUAdam`` under ``offload_optimizer:
cpu`` and ``FusedAdam`` without offload; on the CPU accelerator both JIT-compile their op
(``cpu_adam`` / ``fused_adam``) with ninja and the C++ compiler on PATH. A fresh
``TORCH_EXTENSIONS_DIR`` forces the build, and the compiler first on PATH behaves like gcc 9
(the last gcc without ``-std=c++20``, which DeepSpeed's CPU ops now require): every compile
with ``-std=c++20`` fails with gcc 9's message; everything else (torch's ``c++ -v`` compiler
check) goes to the real compiler. ``deepspeed_shm_comm``, which DeepSpeed builds for every run
on the CPU accelerator, is pre-seeded from the user's torch-extensions cache (or built once
with the real compiler), so only the optimizer's op fails.

The remedy ladder then runs on what really came out, and the same training, with the patch
applied to the same config, under the same broken compiler, trains to the end.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("deepspeed")
pytest.importorskip("transformers")

from dsguard.core.classify import FailureKind, classify_text
from dsguard.core.remedies import (
    GiveUp,
    Remedy,
    compiler_error_line,
    failing_op,
    merged_env,
    next_remedy,
    remedy_args,
    remedy_config,
)
from dsguard.host.envfacts import clear_cache, detect

pytestmark = pytest.mark.train

RUN_TIMEOUT_S = 240
SHM_OP = "deepspeed_shm_comm"
GCC9_ERROR = "error: unrecognized command line option '-std=c++20'; did you mean '-std=c++2a'?"

# ZeRO-2, optimizer state offloaded to the CPU, DeepSpeed's own AdamW: DeepSpeedCPUAdam.
DS_CONFIG: dict[str, Any] = {
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "steps_per_print": 1000000,
}
ARGS = [
    "--model_preset", "tiny", "--generate_data", "16", "--model_max_length", "64",
    "--max_steps", "2", "--per_device_train_batch_size", "4", "--learning_rate", "1e-3",
    "--logging_steps", "1", "--save_strategy", "no", "--seed", "7",
    "--report_to", "none", "--disable_tqdm", "true", "--dataloader_pin_memory", "false",
]  # fmt: skip


def _broken_compilers(bin_dir: Path) -> None:
    """c++/g++/gcc/cc that fail like gcc 9 on -std=c++20 and defer to the real ones otherwise."""
    bin_dir.mkdir(parents=True)
    for name in ("c++", "g++", "gcc", "cc"):
        real = shutil.which(name)
        if real is None:
            pytest.skip(f"no {name} on this machine")
        script = bin_dir / name
        script.write_text(
            "#!/bin/sh\n"
            'for a in "$@"; do\n'
            '  if [ "$a" = "-std=c++20" ]; then\n'
            f'    echo "{name}: {GCC9_ERROR}" >&2\n'
            "    exit 1\n"
            "  fi\n"
            "done\n"
            f'exec "{real}" "$@"\n'
        )
        script.chmod(0o755)


def _clean_env() -> dict[str, str]:
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSGUARD_") and k not in drop}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="2")
    return env


def _built_for_this_interpreter(op_dir: Path) -> bool:
    """A JIT build records its source paths in build.ninja; one made by another venv (another
    checkout) is rebuilt by ninja on load, here with the broken compiler, and the test would
    fail on the wrong op. The sources must be exactly this install's: a substring test
    of ``sys.prefix`` took ``/check/work/main/.venv`` for ``/work/main/.venv``."""
    ninja = op_dir / "build.ninja"
    so = op_dir / f"{SHM_OP}.so"
    if not (so.is_file() and ninja.is_file()):
        return False
    spec = importlib.util.find_spec("deepspeed")  # locates the package without importing it
    if spec is None or spec.origin is None:
        return False
    comm = Path(spec.origin).parent / "ops" / "csrc" / "cpu" / "comm"
    sources = re.findall(r"^build \S+\.o: compile (\S+)$", ninja.read_text(), flags=re.M)
    return bool(sources) and all(Path(src).parent == comm for src in sources)


@pytest.fixture(scope="module")
def shm_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A deepspeed_shm_comm build for this interpreter: the cached one if it is, else built
    once (with the real compiler: about a minute on 2 cores)."""
    env = _clean_env()
    env.pop("TORCH_EXTENSIONS_DIR", None)
    clear_cache()
    default_root = detect(sys.executable, env=env, search_globs=[]).torch_extensions_dir
    root = tmp_path_factory.mktemp("shm-build")
    if default_root is not None and _built_for_this_interpreter(Path(default_root) / SHM_OP):
        # A snapshot, not the shared cache itself: another environment may rebuild that one
        # for its own paths while this module runs. And it must be up to date for ninja: a
        # venv re-created at the same path has sources newer than an older build's objects,
        # which ninja rebuilds, here with the broken compiler (the test then fails on the
        # wrong op).
        snap = root / SHM_OP
        shutil.copytree(Path(default_root) / SHM_OP, snap)
        ninja = shutil.which("ninja") or str(Path(sys.executable).parent / "ninja")
        dry = subprocess.run([ninja, "-n", "-C", str(snap)], capture_output=True, text=True,
                             check=False, timeout=60)  # fmt: skip
        if _built_for_this_interpreter(snap) and "no work to do" in dry.stdout:
            return snap
        shutil.rmtree(snap)
    subprocess.run(
        [sys.executable, "-c",
         "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()"],
        env={**env, "TORCH_EXTENSIONS_DIR": str(root)}, check=True, timeout=RUN_TIMEOUT_S,
        capture_output=True,
    )  # fmt: skip
    return root / SHM_OP


def _seed_shm(ext_dir: Path, shm_build: Path) -> None:
    """Put the built deepspeed_shm_comm into ext_dir (copy2 keeps mtimes: ninja has no work)."""
    ext_dir.mkdir(parents=True)
    shutil.copytree(shm_build, ext_dir / SHM_OP)


def _train(
    tmp: Path, name: str, cfg: dict[str, Any], env: dict[str, str], args: list[str]
) -> tuple[int, str, float]:
    cfg_path = tmp / f"{name}.deepspeed.json"
    cfg_path.write_text(json.dumps(cfg, indent=1))
    argv = [
        sys.executable, "-m", "dsguard.train", *args,
        "--output_dir", str(tmp / f"out-{name}"), "--deepspeed", str(cfg_path),
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(
        argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    (tmp / f"{name}.log").write_text(out)
    return proc.returncode, out, elapsed


@pytest.mark.parametrize(
    ("offload", "op"),
    [
        (True, "cpu_adam"),  # ZeRO-Offload: DeepSpeedCPUAdam
        (False, "fused_adam"),  # no offload: FusedAdam, which the CPU accelerator JIT-builds too
    ],
)
def test_real_op_build_failure_is_healed_by_avoiding_the_op(
    tmp_path: Path, offload: bool, op: str, shm_build: Path
) -> None:
    bin_dir = tmp_path / "broken-bin"
    ext_dir = tmp_path / "torch_extensions"
    env = _clean_env()
    ds_config = json.loads(json.dumps(DS_CONFIG))
    if not offload:
        del ds_config["zero_optimization"]["offload_optimizer"]
    _seed_shm(ext_dir, shm_build)
    _broken_compilers(bin_dir)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["TORCH_EXTENSIONS_DIR"] = str(ext_dir)

    # 1. the real failure
    code, out, failed_s = _train(tmp_path, "attempt-1", ds_config, env, ARGS)
    assert code != 0, out[-3000:]
    assert (ext_dir / op / "build.ninja").is_file()  # the build really ran ...
    assert not (ext_dir / op / f"{op}.so").exists()  # ... and produced nothing

    failure = classify_text(out, code)
    assert failure is not None
    assert failure.kind is FailureKind.DS_BUILD_ERROR, failure
    assert any(f"Error building extension '{op}'" in ev for ev in failure.evidence)

    # 2. the remedy, from the classifier's evidence plus the log tail (where gcc's line is)
    tail = out.splitlines()[-200:]
    lines = [*failure.evidence, *tail]
    assert failing_op(lines) == op
    first_error = compiler_error_line(lines)
    assert first_error is not None
    assert first_error.endswith(GCC9_ERROR)
    clear_cache()
    facts = detect(sys.executable, env=env)
    assert facts.torch_extensions_dir == str(ext_dir)
    remedy = next_remedy(failure.kind, lines, frozenset(), facts, ds_config=ds_config)
    assert isinstance(remedy, Remedy), remedy
    assert remedy.name == f"avoid_{op}"
    assert dict(remedy.config.set) == {"optimizer.params.torch_adam": True}

    # 3. the same training with the remedy applied, same broken compiler: trains to the end
    # (what launch does with the run's applied remedies)
    applied = [Remedy.from_dict(remedy.as_dict())]  # as persisted in state.json
    healed_cfg = remedy_config(ds_config, applied)
    healed_env = {**env, **merged_env(applied)}
    code2, out2, healed_s = _train(
        tmp_path, "attempt-2", healed_cfg, healed_env, remedy_args(ARGS, applied)
    )
    assert code2 == 0, out2[-3000:]
    assert "dsguard.train: finished global_step=2/2" in out2
    assert classify_text(out2, code2) is None
    assert not (ext_dir / op / f"{op}.so").exists()  # done without the op

    # 4. had it failed again, the ladder ends naming the op and gcc's line
    final = next_remedy(failure.kind, lines, frozenset({remedy.name}), facts, ds_config=ds_config)
    assert isinstance(final, GiveUp)
    assert op in final.reason
    assert GCC9_ERROR in final.reason

    print(
        f"\nfailing attempt (startup + failed {op} build): {failed_s:.1f} s; "
        f"healed attempt: {healed_s:.1f} s; remedy: {remedy.reason}"
    )
