"""Whose build failed: the ds_build_error advice names the package that owns it.

``ds_build_error`` covers every compiled op or extension that fails to build or load (the
corpus labels apex, exllamav2, mamba's kernels the same as DeepSpeed's cpu_adam: the failure and
its first remedy, a CUDA toolkit that matches torch, are the same). What to do afterwards is
not: DeepSpeed's ops are pre-built with ``DS_BUILD_<VAR>=1 pip install deepspeed``, another
package's extension by rebuilding that package against the installed torch. Advice to pre-build
a DeepSpeed op for apex's build sends the user the wrong way, and a variable named from the op
alone (``DS_BUILD_ASYNC_IO``) is one DeepSpeed's setup.py never reads (it reads
``DS_BUILD_AIO``).

The logs are real: corpus logs from public issue threads (their sources are in
tests/data/corpus/index.jsonl).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from dsguard.core.classify import FailureKind
from dsguard.core.remedies import DS_OP_BUILD_VARS, GiveUp, build_subject, next_remedy
from dsguard.host.envfacts import EnvFacts

CORPUS = Path(__file__).parent / "data" / "corpus"
BUILD = CORPUS / "failures" / "ds_build_error"

# A host with no toolkit and a CPU torch: no CUDA_HOME remedy applies, so the ladder goes
# straight to what the user must do.
NO_TOOLKIT = EnvFacts(python="/venv/bin/python", torch_version="2.13.0+cpu")
ADAMW_CFG = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}


def _lines(name: str) -> list[str]:
    return (BUILD / name).read_text(errors="replace").splitlines()


@pytest.mark.parametrize(
    ("name", "what", "deepspeed"),
    [
        # pip's "Failed building wheel for apex" (NVIDIA/apex#1531)
        ("h20e-pip-apex-nvcc-static-cast-1531.log", "apex's compiled extension", False),
        # setuptools' "building 'syncbn' extension" in apex's install (NVIDIA/apex#1173)
        ("h21b-other-apex-layernorm-nvcc-failed-1173.log", "the syncbn extension", False),
        # torch's "Error building extension 'exllamav2_ext'" (exllamav2#114)
        ("h21b-python-exllamav2-nvcc-std-cxx17-114.log", "the exllamav2_ext extension", False),
        # mamba's kernel built against another torch: "...cpython-310-...so: undefined symbol"
        (
            "h91e-python-mamba-selective-scan-undefined-symbol-317.log",
            "the selective_scan_cuda extension",
            False,
        ),
        # DeepSpeed's own ops keep their names
        ("pytest-e-unable-to-jit-load-async-io-1037.log", "the async_io op", True),
        ("ds-zero3-fused-adam-ninja-calledprocess.log", "the fused_adam op", True),
        # pip building DeepSpeed itself (LLaVA#716): DeepSpeed's, op unnamed
        ("h61a-other-llava-pip-cuda-home-716.log", "a DeepSpeed op", True),
    ],
)
def test_build_subject_names_the_owner(name: str, what: str, deepspeed: bool) -> None:
    subject = build_subject(_lines(name))
    assert subject.what == what
    assert subject.deepspeed is deepspeed


def test_an_op_deepspeed_names_is_deepspeeds_even_if_the_table_lacks_it() -> None:
    """A newer DeepSpeed's op (not in DS_OP_BUILD_VARS) that its own loader names stays
    DeepSpeed's: advice to pre-build DeepSpeed's ops, never "not a DeepSpeed op"."""
    lines = ["RuntimeError: Unable to JIT load the future_kernel op due to it not being "
             "compatible due to hardware/software issue."]  # fmt: skip
    subject = build_subject(lines)
    assert subject.op == "future_kernel" and subject.deepspeed is True
    assert subject.build_var is None  # the install variable is not guessed from the name
    got = next_remedy(FailureKind.DS_BUILD_ERROR, lines, frozenset(), NO_TOOLKIT)
    assert isinstance(got, GiveUp) and "DS_BUILD_OPS=1 pip install deepspeed" in got.reason
    assert "not a DeepSpeed op" not in got.reason


def test_pip_names_the_build_that_failed_not_one_that_finished() -> None:
    lines = [
        "  Building wheel for flash-attn (setup.py) ... done",
        "  Building wheel for causal-conv1d (setup.py) ... error",
        "  error: subprocess-exited-with-error",
    ]
    assert build_subject(lines).package == "causal-conv1d"
    verdict = [*lines, "Failed to build mamba-ssm causal-conv1d"]
    assert build_subject(verdict).package == "mamba-ssm"  # pip's own verdict comes first


def test_a_missing_runtime_library_is_no_extension_and_an_unnamed_build_is_nobodys() -> None:
    missing = ["ImportError: libcudart.so.12: cannot open shared object file: No such file"]
    assert build_subject(missing).op is None
    bare = ["ninja: build stopped: subcommand failed."]
    assert build_subject(bare).deepspeed is None
    assert build_subject(bare).what == "an op or extension the log does not name"
    # the same log in a job with a DeepSpeed config: its JIT-built ops are the likely ones
    assert build_subject(bare, deepspeed_job=True).deepspeed is True


def _advice(name: str) -> str:
    """What a DeepSpeed job is told after the build in corpus log ``name`` (no remedy applies on
    a host without a toolkit, so the first answer is the give-up)."""
    got = next_remedy(
        FailureKind.DS_BUILD_ERROR, _lines(name), frozenset(), NO_TOOLKIT, ds_config=ADAMW_CFG
    )
    assert isinstance(got, GiveUp), got
    return got.reason


def test_another_packages_build_gets_that_packages_advice_not_deepspeeds() -> None:
    reason = _advice("h20e-pip-apex-nvcc-static-cast-1531.log")
    assert reason.startswith("could not build apex's compiled extension")
    assert "pip install --no-build-isolation --no-cache-dir --force-reinstall apex" in reason
    assert "no DeepSpeed setting avoids it" in reason
    assert "DS_BUILD" not in reason and "pip install deepspeed" not in reason


def test_async_io_advice_names_the_variable_deepspeed_reads() -> None:
    reason = _advice("pytest-e-unable-to-jit-load-async-io-1037.log")
    assert "DS_BUILD_AIO=1 pip install deepspeed" in reason
    assert "DS_BUILD_ASYNC_IO" not in reason


def test_every_corpus_build_log_gets_advice_for_its_owner() -> None:
    """Over every ds_build_error log of the corpus: a DS_BUILD_ variable named in the advice is
    one DeepSpeed reads, and a build the log shows is not DeepSpeed's is never told to
    reinstall DeepSpeed."""
    known = set(DS_OP_BUILD_VARS.values()) | {"DS_BUILD_OPS"}
    foreign = 0
    rows = [json.loads(line) for line in (CORPUS / "index.jsonl").read_text().splitlines()]
    logs = [d for d in rows if d["label"] == "ds_build_error"]
    assert len(logs) >= 200
    for d in logs:
        lines = (CORPUS / d["file"]).read_text(errors="replace").splitlines()
        applied: set[str] = set()
        got = next_remedy(FailureKind.DS_BUILD_ERROR, lines, frozenset(), NO_TOOLKIT)
        while not isinstance(got, GiveUp):  # walk the ladder: each remedy at most once
            assert got.name not in applied, (d["file"], got.name)
            applied.add(got.name)
            got = next_remedy(FailureKind.DS_BUILD_ERROR, lines, frozenset(applied), NO_TOOLKIT)
        assert set(re.findall(r"DS_BUILD_\w+", got.reason)) <= known, (d["file"], got.reason)
        if build_subject(lines).deepspeed is False:
            foreign += 1
            assert "pip install deepspeed" not in got.reason, (d["file"], got.reason)
    assert foreign >= 10


_NAME = re.compile(r'^\s+NAME = ["\'](\w+)["\']', re.MULTILINE)
_VAR = re.compile(r'^\s+BUILD_VAR = ["\'](\w+)["\']', re.MULTILINE)


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed not installed")
def test_the_op_table_matches_the_installed_deepspeeds_builders() -> None:
    """Read each builder's NAME and BUILD_VAR from the installed DeepSpeed's source (importing
    it would start accelerator detection): every op it builds here is in the table, with the
    variable its setup.py reads."""
    spec = importlib.util.find_spec("deepspeed")
    assert spec is not None and spec.origin is not None
    root = Path(spec.origin).parent / "ops" / "op_builder"
    seen = 0
    for path in [*root.glob("*.py"), *(root / "cpu").glob("*.py")]:
        text = path.read_text()
        for name, var in zip(_NAME.findall(text), _VAR.findall(text), strict=False):
            if name in {"flash_attn", "deepspeed_not_implemented", "not_implemented"}:
                continue  # accelerator stubs and the NPU/XPU flash_attn (see the table)
            assert DS_OP_BUILD_VARS.get(name) == var, (path.name, name, var)
            seen += 1
    assert seen >= 20
