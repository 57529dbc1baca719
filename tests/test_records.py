"""The records' ``as_dict`` / ``from_dict`` go through msgspec (``dsguard.core.records``).

Each ``*_DICT`` below is the literal dict the hand-written ``as_dict`` of dsguard 0.x produced
for the same instance (taken by running that code): key order, lists for tuples and sets,
enum values, paths as str, None kept. A ``state.json`` written by an older dsguard holds these
shapes, and the optional keys it may lack still load with the defaults of old.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dsguard.cli.doctor import Check
from dsguard.core.classify import FailureKind
from dsguard.core.envfacts import EnvFacts, GpuFact, Toolkit
from dsguard.core.ladder import AttemptRecord
from dsguard.core.ledger import Ledger
from dsguard.core.preflight import Fix, Problem
from dsguard.core.records import as_builtins, from_builtins
from dsguard.core.remedies import ConfigPatch, Remedy
from dsguard.job.knobs import Knobs, Offload
from dsguard.run.proc import AttemptRef

TOOLKIT = Toolkit(
    path="/usr/local/cuda", realpath="/usr/local/cuda-12.1", version="12.1", full_version=None,
    version_source="nvcc", has_nvcc=True, has_headers=False, found_via="PATH",
)  # fmt: skip
TOOLKIT_DICT = {
    "path": "/usr/local/cuda", "realpath": "/usr/local/cuda-12.1", "version": "12.1",
    "full_version": None, "version_source": "nvcc", "has_nvcc": True, "has_headers": False,
    "found_via": "PATH",
}  # fmt: skip
GPU = GpuFact(index=0, uuid="GPU-1", name=None, capability=(8, 0))
GPU_DICT = {"index": 0, "uuid": "GPU-1", "name": None, "capability": [8, 0]}
GPU_NOCAP = GpuFact(index=1, uuid=None, name="H100", capability=None)
GPU_NOCAP_DICT = {"index": 1, "uuid": None, "name": "H100", "capability": None}
ENV = EnvFacts(
    python="/venv/bin/python", torch_version="2.3.0", torch_cuda="12.1", torch_hip=None,
    torch_error=None, cuda_home="/usr/local/cuda", torch_extensions_dir=None,
    deepspeed_version="0.14.0", toolkits=(TOOLKIT,), gpus=(GPU, GPU_NOCAP), gpu_error=None,
    ds_skip_cuda_check=True, notes=("a", "b"),
)  # fmt: skip
ENV_DICT = {
    "python": "/venv/bin/python", "torch_version": "2.3.0", "torch_cuda": "12.1",
    "torch_hip": None, "torch_error": None, "cuda_home": "/usr/local/cuda",
    "torch_extensions_dir": None, "deepspeed_version": "0.14.0", "toolkits": [TOOLKIT_DICT],
    "gpus": [GPU_DICT, GPU_NOCAP_DICT], "gpu_error": None, "ds_skip_cuda_check": True,
    "notes": ["a", "b"],
}  # fmt: skip
EMPTY_ENV_DICT: dict[str, Any] = {
    "python": "", "torch_version": None, "torch_cuda": None, "torch_hip": None,
    "torch_error": None, "cuda_home": None, "torch_extensions_dir": None,
    "deepspeed_version": None, "toolkits": [], "gpus": None, "gpu_error": None,
    "ds_skip_cuda_check": False, "notes": [],
}  # fmt: skip
REC = AttemptRecord(attempt=2, kind=FailureKind.CUDA_OOM, uptime_s=12.5, progressed=True)
REC_DICT = {"attempt": 2, "kind": "cuda_oom", "uptime_s": 12.5, "progressed": True}
REC_OK = AttemptRecord(attempt=3, kind=None, uptime_s=0.0, progressed=False)
REC_OK_DICT = {"attempt": 3, "kind": None, "uptime_s": 0.0, "progressed": False}
PATCH = ConfigPatch(set={"bf16.enabled": False, "zero_optimization.stage": 2}, drop=("optimizer",))
PATCH_DICT = {"set": {"bf16.enabled": False, "zero_optimization.stage": 2}, "drop": ["optimizer"]}
REMEDY = Remedy(
    name="cuda_home", kind=FailureKind.DS_BUILD_ERROR, reason="why",
    env={"CUDA_HOME": "/usr/local/cuda"}, config=PATCH, flags={"--fp16": "false"},
    flags_anchor="--bf16", caveats=("c1",), new_phase=True,
)  # fmt: skip
REMEDY_DICT = {
    "name": "cuda_home", "kind": "ds_build_error", "reason": "why",
    "env": {"CUDA_HOME": "/usr/local/cuda"}, "config": PATCH_DICT, "flags": {"--fp16": "false"},
    "flags_anchor": "--bf16", "caveats": ["c1"], "new_phase": True,
}  # fmt: skip
KNOBS_DICT = {
    "micro_batch_size": 8, "gradient_accumulation_steps": 1, "max_length": 512,
    "zero_stage": 2, "offload": "none", "lora": False, "gradient_checkpointing": False,
    "dataloader_workers": 0, "pin_memory": True, "ds_bucket_divisor": 1,
}  # fmt: skip
LEDGER = Ledger(
    knobs=Knobs(micro_batch_size=8, max_length=512, zero_stage=2, offload=Offload.NONE),
    ckpt_dir=Path("/ck"), positions={"oom": 2, "a": 1}, history=(REC, REC_OK), phase=2,
    phase_output=Path("/out/phase-2"), phase_init_from=None,
    caps=frozenset({"save_and_stop", "a_cap", "m_cap", "b_cap"}), attempt=3, remedies=(REMEDY,),
    numbered_after=1,
)  # fmt: skip
LEDGER_DICT = {
    "knobs": KNOBS_DICT, "ckpt_dir": "/ck", "positions": {"oom": 2, "a": 1},
    "history": [REC_DICT, REC_OK_DICT], "phase": 2, "phase_output": "/out/phase-2",
    "phase_init_from": None, "caps": ["a_cap", "b_cap", "m_cap", "save_and_stop"],
    "attempt": 3, "remedies": [REMEDY_DICT], "numbered_after": 1,
    "skip_batches": [], "rollbacks": 0,
}  # fmt: skip
MIN_LEDGER = Ledger(knobs=Knobs(micro_batch_size=1), ckpt_dir=None)
MIN_LEDGER_DICT: dict[str, Any] = {
    "knobs": {
        **KNOBS_DICT, "micro_batch_size": 1, "max_length": None, "zero_stage": None,
    },
    "ckpt_dir": None, "positions": {}, "history": [], "phase": 1, "phase_output": None,
    "phase_init_from": None, "caps": [], "attempt": 0, "remedies": [], "numbered_after": 0,
    "skip_batches": [], "rollbacks": 0,
}  # fmt: skip
REF = AttemptRef(run_id="r1", attempt=4, sid=1234, started_epoch_s=1700000000.5)
REF_DICT = {
    "run_id": "r1", "attempt": 4, "sid": 1234, "started_epoch_s": 1700000000.5,
    "launcher_create_time": None,
}  # fmt: skip
REF_CT = AttemptRef(
    run_id="r1", attempt=4, sid=1234, started_epoch_s=1700000000.5,
    launcher_create_time=1700000000.25,
)  # fmt: skip
REF_CT_DICT = {**REF_DICT, "launcher_create_time": 1700000000.25}

#: (instance, the dict the hand-written as_dict gave for it).
ROUND_TRIP: list[tuple[Any, dict[str, Any]]] = [
    (TOOLKIT, TOOLKIT_DICT),
    (GPU, GPU_DICT),
    (GPU_NOCAP, GPU_NOCAP_DICT),
    (ENV, ENV_DICT),
    (EnvFacts(), EMPTY_ENV_DICT),
    (REC, REC_DICT),
    (REC_OK, REC_OK_DICT),
    (PATCH, PATCH_DICT),
    (ConfigPatch(), {"set": {}, "drop": []}),
    (REMEDY, REMEDY_DICT),
    (LEDGER, LEDGER_DICT),
    (MIN_LEDGER, MIN_LEDGER_DICT),
    (REF, REF_DICT),
    (REF_CT, REF_CT_DICT),
]

#: Records that are only ever written (no from_dict).
WRITE_ONLY: list[tuple[Any, dict[str, Any]]] = [
    (
        Fix(path="zero_optimization.reduce_bucket_size", old="5e8", new=500000000, why="int"),
        {
            "path": "zero_optimization.reduce_bucket_size",
            "old": "5e8",
            "new": 500000000,
            "why": "int",
        },
    ),
    (
        Fix(path="bf16.enabled", old=None, new={"x": [1, 2]}, why="added"),
        {"path": "bf16.enabled", "old": None, "new": {"x": [1, 2]}, "why": "added"},
    ),
    (
        Problem(path="train_batch_size", message="refused"),
        {"path": "train_batch_size", "message": "refused"},
    ),
    (
        Check(name="torch", status="warn", value="2.3", fix=None),
        {"name": "torch", "status": "warn", "value": "2.3", "fix": None},
    ),
]


def _name(value: object) -> str:
    return type(value).__name__


@pytest.mark.parametrize(("record", "expected"), ROUND_TRIP + WRITE_ONLY, ids=_name)
def test_as_dict_is_the_old_dict(record: Any, expected: dict[str, Any]) -> None:
    out = record.as_dict()
    assert out == expected
    # == ignores key order and list/tuple would differ only in type: pin both.
    assert json.dumps(out) == json.dumps(expected)
    assert repr(out) == repr(expected)


@pytest.mark.parametrize(("record", "expected"), ROUND_TRIP, ids=_name)
def test_from_dict_inverts_as_dict(record: Any, expected: dict[str, Any]) -> None:
    cls = type(record)
    assert cls.from_dict(record.as_dict()) == record
    # What a state.json holds: the JSON text, read back.
    assert cls.from_dict(json.loads(json.dumps(expected))) == record


def test_ledger_json_text_is_unchanged() -> None:
    """The exact text state.json gets for a ledger (key order included)."""
    assert json.dumps(LEDGER.as_dict()) == (
        '{"knobs": {"micro_batch_size": 8, "gradient_accumulation_steps": 1, "max_length": 512, '
        '"zero_stage": 2, "offload": "none", "lora": false, "gradient_checkpointing": false, '
        '"dataloader_workers": 0, "pin_memory": true, "ds_bucket_divisor": 1}, "ckpt_dir": "/ck", '
        '"positions": {"oom": 2, "a": 1}, "history": [{"attempt": 2, "kind": "cuda_oom", '
        '"uptime_s": 12.5, "progressed": true}, {"attempt": 3, "kind": null, "uptime_s": 0.0, '
        '"progressed": false}], "phase": 2, "phase_output": "/out/phase-2", '
        '"phase_init_from": null, "caps": ["a_cap", "b_cap", "m_cap", "save_and_stop"], '
        '"attempt": 3, "remedies": [{"name": "cuda_home", "kind": "ds_build_error", '
        '"reason": "why", "env": {"CUDA_HOME": "/usr/local/cuda"}, "config": {"set": '
        '{"bf16.enabled": false, "zero_optimization.stage": 2}, "drop": ["optimizer"]}, '
        '"flags": {"--fp16": "false"}, "flags_anchor": "--bf16", "caveats": ["c1"], '
        '"new_phase": true}], "numbered_after": 1, "skip_batches": [], "rollbacks": 0}'
    )


def test_missing_optional_keys_load_with_the_old_defaults() -> None:
    """What the hand-written from_dict tolerated: missing optional keys take defaults."""
    assert Toolkit.from_dict({"path": "/c", "realpath": "/c"}) == Toolkit(
        path="/c", realpath="/c", version=None, full_version=None, version_source="unknown",
        has_nvcc=False, has_headers=False, found_via="search",
    )  # fmt: skip
    assert GpuFact.from_dict({"index": 2}) == GpuFact(2, None, None, None)
    assert EnvFacts.from_dict({}) == EnvFacts()
    assert ConfigPatch.from_dict({}) == ConfigPatch()
    remedy = Remedy.from_dict({"name": "r", "kind": "ds_build_error"})
    assert remedy == Remedy(name="r", kind=FailureKind.DS_BUILD_ERROR, reason="")
    ref = AttemptRef.from_dict({"run_id": "r1", "attempt": 4, "sid": 1234, "started_epoch_s": 5})
    assert ref == AttemptRef("r1", 4, 1234, 5.0, None)
    assert isinstance(ref.started_epoch_s, float)
    # An early state.json: the knobs only (and a knob a newer dsguard dropped is ignored).
    old = Ledger.from_dict({"knobs": {"micro_batch_size": 1, "retired_knob": 3}})
    assert old == MIN_LEDGER
    assert isinstance(old.knobs.offload, Offload)
    rec = AttemptRecord.from_dict({"attempt": 1, "uptime_s": 3, "kind": None, "progressed": 0})
    assert rec == AttemptRecord(1, None, 3.0, False)


def test_numbers_written_as_strings_still_load() -> None:
    """The old from_dict read ``int(str(v))``; msgspec's lax mode reads them too."""
    data: dict[str, object] = {
        "run_id": "r1",
        "attempt": "4",
        "sid": "1234",
        "started_epoch_s": "1700000000.5",
    }
    assert AttemptRef.from_dict(data) == REF


def test_a_broken_record_is_a_value_error() -> None:
    """The loop discards an unreadable state.json on ValueError/KeyError/TypeError."""
    with pytest.raises(ValueError, match="micro_batch_size"):
        Ledger.from_dict({"knobs": {}})
    with pytest.raises(ValueError, match="not_a_kind"):
        Remedy.from_dict({"name": "r", "kind": "not_a_kind"})
    assert issubclass(msgspec.ValidationError, ValueError)


def test_helpers_on_paths_and_sets() -> None:
    assert as_builtins(GPU) == GPU_DICT
    assert from_builtins(GPU_DICT, GpuFact) == GPU
    assert as_builtins(MIN_LEDGER)["ckpt_dir"] is None
    assert from_builtins({"knobs": KNOBS_DICT, "ckpt_dir": "/x"}, Ledger).ckpt_dir == Path("/x")
