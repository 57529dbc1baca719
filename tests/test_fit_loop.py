"""First fit, evidence and calibration in the run loop (FakeHost; facts given as plain values),
the model-shape reader on real files, and ``dsguard plan --fit``."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import struct
from pathlib import Path
from typing import Any

import pytest

from dsguard.cli.main import main
from dsguard.core.estimate import DsBuffers, ModelShape, Regime, estimate
from dsguard.core.fit import FitInputs
from dsguard.host.modelshape import read_model_shape, safetensors_params
from dsguard.job.file import load_job
from dsguard.job.knobs import Knobs
from dsguard.job.model import HOST_OOM_RUNGS, OOM_RUNGS
from dsguard.run.fit import FitState
from dsguard.run.loop import Supervisor
from dsguard.run.sdnotify import Notifier
from dsguard.run.store import KnownGoodStore, StoreUnavailable, summarize
from dsguard.testing import Beat, FakeHost, Script
from tests.conftest import write_job

SHAPE = ModelShape(
    hidden_size=2048, num_layers=22, num_heads=32, intermediate_size=5632, vocab_size=32000,
    num_kv_heads=4, max_position=2048, source="test",
)  # fmt: skip
REGIME = Regime("gpu", dtype_bytes=2, buffers=DsBuffers(50_000_000, 50_000_000))
GIB = 2**30
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def _ok(**kw: Any) -> Script:
    return Script(lines=((1.0, "step 1"), (2.0, "done")), exit_at_s=2.5, **kw)


def run_fit_job(
    tmp_path: Path,
    scripts: list[Script],
    facts: FitInputs | str,
    train: dict[str, Any],
    **job: Any,
) -> tuple[int, list[dict[str, Any]], FakeHost, Any]:
    """A ZeRO-2 job with ``train`` (``job`` sections override) through the real loop on a
    FakeHost; (exit, events, host, the loaded job)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    sections: dict[str, Any] = {"train": train, "deepspeed": {"config": str(ds)}, **job}
    write_job(tmp_path, [], **sections)
    loaded = load_job(tmp_path / "job.yaml")
    loaded.log_dir.mkdir(parents=True, exist_ok=True)
    assert loaded.checkpoints is not None
    host = FakeHost(scripts, ckpt_dir=loaded.checkpoints.dir)
    sup = Supervisor(loaded, host=host, base_env={}, notifier=Notifier({}),
                     fit_facts=lambda _job: facts)  # fmt: skip
    code = sup.run()
    lines = (loaded.log_dir / "events.jsonl").read_text().splitlines()
    return code, [json.loads(x) for x in lines], host, loaded


def _run(tmp_path: Path, scripts: list[Script], facts: FitInputs | str, **job: Any):  # type: ignore[no-untyped-def]
    train = job.pop("train", {"micro_batch_size": 16, "gradient_accumulation_steps": 1})
    code, events, _, loaded = run_fit_job(tmp_path, scripts, facts, train, **job)
    return code, events, loaded


def _facts(available: int) -> FitInputs:
    return FitInputs(SHAPE, REGIME, available, rungs=(*OOM_RUNGS, *HOST_OOM_RUNGS))


def _named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


def test_first_attempt_starts_at_the_planned_config(tmp_path: Path) -> None:
    code, events, job = _run(tmp_path, [_ok()], _facts(40 * GIB))
    assert code == 0
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "estimate"
    assert applied["predicted_peak_bytes"] <= 0.9 * 40 * GIB < applied["start_predicted_peak_bytes"]
    (started,) = _named(events, "attempt_started")
    assert started["knobs"] == applied["knobs"] != job.knobs.as_dict()
    assert started["global_batch"] == 16
    assert [e["event"] for e in events].index("plan_applied") < [e["event"] for e in events].index(
        "attempt_started"
    )


def test_fit_false_and_unknown_shape_change_nothing(tmp_path: Path) -> None:
    _, events, _ = _run(tmp_path / "a", [_ok()], _facts(40 * GIB), fit=False)
    assert not _named(events, "plan_applied") and not _named(events, "plan_skipped")
    assert _named(events, "attempt_started")[0]["knobs"]["micro_batch_size"] == 16
    _, events, _ = _run(tmp_path / "b", [_ok()], "no local model config found")
    (skipped,) = _named(events, "plan_skipped")
    assert "model shape unknown: no local model config" in skipped["reason"]
    assert _named(events, "attempt_started")[0]["knobs"]["micro_batch_size"] == 16


def test_a_config_predicted_to_fit_is_kept(tmp_path: Path) -> None:
    _, events, _ = _run(tmp_path, [_ok()], _facts(10_000 * GIB))
    (skipped,) = _named(events, "plan_skipped")
    assert skipped["reason"] == "the start config is predicted to fit"
    assert skipped["available_bytes"] == 10_000 * GIB


def test_an_unforeseen_oom_is_healed_by_evidence_and_calibrates(tmp_path: Path) -> None:
    """The plan keeps the start (it predicts a fit), the attempt OOMs anyway after one step
    with a measured peak above the prediction (a lower bound of the need, so it may only
    scale the estimate up): the estimate is calibrated, the evidence is logged, and the next
    move is chosen by predicted savings."""
    measured = 150 * GIB
    first = Script(
        lines=((1.0, "step 1"), (3.0, OOM)), exit_at_s=None,
        heartbeats=(Beat(at_s=2.0, step=1, gpu_mem_bytes=measured),),
    )  # fmt: skip
    code, events, _ = _run(tmp_path, [first, _ok()], _facts(10_000 * GIB))
    assert code == 0
    (cal,) = _named(events, "estimate_calibrated")
    start = Knobs(16, 1, zero_stage=2)
    assert cal["measured_bytes"] == measured and cal["measure"] == "max_memory_reserved"
    predicted = estimate(SHAPE, start, REGIME).gpu
    assert predicted is not None and cal["predicted_bytes"] == predicted.total
    assert cal["scale"] == pytest.approx(measured / predicted.total, rel=1e-3)
    (ev,) = _named(events, "evidence_considered")
    assert ev["tried_bytes"] == 2 * GIB and ev["rung"] is not None
    assert "predicted to save" in ev["reason"]
    started = _named(events, "attempt_started")
    assert [s["global_batch"] for s in started] == [16, 16]


# -- the model-shape reader on real files -----------------------------------------------------


def _safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_shape_from_config_json_and_safetensors_headers(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    }))  # fmt: skip
    shape, where = read_model_shape(["--model_name_or_path", "model"], tmp_path)
    assert shape is not None and where.endswith("config.json")
    assert (shape.hidden_size, shape.num_kv_heads, shape.tied_embeddings) == (64, 2, True)
    assert shape.n_params is None
    _safetensors(model / "model-00001.safetensors", {"a": [10, 20], "b": [7]})
    _safetensors(model / "model-00002.safetensors", {"c": [3, 3, 3]})
    assert safetensors_params(model) == 200 + 7 + 27
    shape, where = read_model_shape(["--model_name_or_path=model"], tmp_path)
    assert shape is not None and shape.param_count() == 234 and "safetensors" in shape.source
    (model / "model-00002.safetensors").write_bytes(b"\xff" * 8)  # a corrupt header length
    assert safetensors_params(model) is None


def test_no_model_flag_or_a_broken_config_says_why(tmp_path: Path) -> None:
    shape, why = read_model_shape(["--model_preset", "small"], tmp_path)
    assert shape is None and "no local model config" in why
    (tmp_path / "c.json").write_text("{not json")
    shape, why = read_model_shape(["--model_config", "c.json"], tmp_path)
    assert shape is None and "unreadable" in why
    (tmp_path / "d.json").write_text(json.dumps({"hidden_size": 8}))
    shape, why = read_model_shape(["--model_config", "d.json"], tmp_path)
    assert shape is None and "lacks" in why


# -- dsguard plan --fit -------------------------------------------------------------------------


def _plan_job(tmp_path: Path, limit: str) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({
        "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
        "num_attention_heads": 8, "vocab_size": 1000,
    }))  # fmt: skip
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e7}}))
    return write_job(
        tmp_path, ["--model_name_or_path", "model", "--attn_implementation", "eager"],
        train={"micro_batch_size": 16, "gradient_accumulation_steps": 1, "max_length": 1024},
        flags={"max_length": "--model_max_length", "lora": None},
        deepspeed={"config": str(ds)}, resources={"host_memory_limit": limit},
    )  # fmt: skip


def test_plan_fit_json_lists_every_candidate_with_peaks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CPU here (no NVML): the host limit is the budget. 4 GiB: micro 16 does not fit."""
    path = _plan_job(tmp_path, "4GiB")
    assert main(["plan", "--fit", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"] == "cpu" and out["available_bytes"] <= 4 * GIB
    cands = out["candidates"]
    assert cands[0]["path"] == [] and cands[0]["fits"] is False
    assert all({"peak_bytes", "host", "fits"} <= set(c) for c in cands)
    assert out["chosen"] is not None and out["chosen"]["fits"]
    assert out["chosen"]["peak_bytes"] <= 0.9 * out["available_bytes"]
    assert out["chosen"]["knobs"]["micro_batch_size"] < 16


def test_plan_fit_says_when_the_shape_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_job(tmp_path, [])
    assert main(["plan", "--fit", str(path)]) == 0
    assert "model shape unknown" in capsys.readouterr().out


# -- the known-good store -----------------------------------------------------------------------


def test_store_records_and_summarizes_the_newest_outcome(tmp_path: Path) -> None:
    store = KnownGoodStore(tmp_path / "s.sqlite")
    a, b = {"micro_batch_size": 4}, {"micro_batch_size": 2}
    store.record("sig", a, "fit", 10, 1.5)
    store.record("sig", b, "fit", 8, 2.0)
    store.record("sig", a, "oom")
    store.record("other", a, "fit", 1, 9.0)
    by = summarize(store.lookup("sig"))
    assert {json.loads(k)["micro_batch_size"]: v["outcome"] for k, v in by.items()} == {
        4: "oom", 2: "fit",
    }  # fmt: skip
    assert by[json.dumps(b)]["samples_per_s"] == 2.0


def test_a_corrupt_store_is_reported_and_planning_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"this is not a database, just text " * 200)
    with pytest.raises(StoreUnavailable, match="not a database"):
        KnownGoodStore(path).lookup("sig")
    facts = dataclasses.replace(_facts(40 * GIB), signature="sig")
    monkeypatch.setenv("DSGUARD_STORE", str(path))
    code, events, _ = _run(tmp_path / "run", [_ok()], facts)
    assert code == 0
    (warned,) = _named(events, "store_unavailable")
    assert "not a database" in warned["reason"]
    assert _named(events, "plan_applied")[0]["source"] == "estimate"
    state = FitState(facts, store=KnownGoodStore(path))
    assert state.known() == {} and state.store is None
    assert state.store_problem is not None and "not a database" in state.store_problem


def test_a_held_lock_is_reported_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    KnownGoodStore(path).record("sig", {"micro_batch_size": 4}, "fit")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another dsguard in the middle of a write
    try:
        state = FitState(dataclasses.replace(_facts(40 * GIB), signature="sig"),
                         store=KnownGoodStore(path))  # fmt: skip
        assert state.known() == {}
        assert state.store_problem is not None and "locked" in state.store_problem
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_second_run_starts_from_the_config_the_first_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 1 (no model shape for the estimate to trust: nothing predicted to fit) heals an
    OOM by the ladder and records both outcomes; run 2 of the same regime starts at the
    config that fitted, with ``plan_applied`` saying ``store``, and fails no more."""
    monkeypatch.setenv("DSGUARD_STORE", str(tmp_path / "store.sqlite"))
    facts = dataclasses.replace(_facts(1 * GIB), signature="regime-1")  # nothing fits
    oom = Script(lines=((1.0, "step 0"), (3.0, OOM)), exit_at_s=None)
    fits = Script(lines=((1.0, "step 1"), (2.0, "done")), exit_at_s=2.5,
                  heartbeats=(Beat(at_s=2.0, step=2, gpu_mem_bytes=GIB),))  # fmt: skip
    code, events, _ = _run(tmp_path / "one", [oom, fits], facts)
    assert code == 0
    first = _named(events, "attempt_started")
    assert len(first) == 2 and not _named(events, "plan_applied")
    healed = first[1]["knobs"]
    code, events, _ = _run(tmp_path / "two", [_ok()], facts)
    assert code == 0
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store" and applied["knobs"] == healed
    assert [s["knobs"] for s in _named(events, "attempt_started")] == [healed]
    assert not _named(events, "failure_detected")


def test_cpu_calibration_only_where_rss_is_what_is_limited() -> None:
    """Under RLIMIT_AS the limit is virtual memory: an RSS-based scale would shrink the
    estimate below what fails, so it is not taken."""
    cpu = FitInputs(SHAPE, Regime("cpu", dtype_bytes=4), 64 * GIB)
    knobs = Knobs(1, 1, max_length=128, zero_stage=2)
    limited = FitState(cpu, rss_comparable=False)
    assert limited.calibrate(knobs, None, 10 * GIB) is None and limited.scale == 1.0
    cgroup = FitState(cpu)
    got = cgroup.calibrate(knobs, None, 10 * GIB)
    assert got is not None and got[2] == "host_rss" and got[1] == 10 * GIB
    assert cgroup.scale == pytest.approx(10 * GIB / got[0])
    assert cgroup.predict(knobs) == pytest.approx(10 * GIB, rel=1e-6)
    # After an OOM the peak seen is a lower bound: it never scales the estimate down.
    assert cgroup.calibrate(knobs, None, 5 * GIB, lower_bound=True) is None
    assert cgroup.predict(knobs) == pytest.approx(10 * GIB, rel=1e-6)
    assert cgroup.calibrate(knobs, None, 20 * GIB, lower_bound=True) is not None
    assert cgroup.predict(knobs) == pytest.approx(20 * GIB, rel=1e-6)


def test_a_job_on_gpus_this_machine_cannot_see_has_an_unknown_budget(tmp_path: Path) -> None:
    """No NVML here: a job naming GPUs is planned against GPU memory, which is unknown; the
    host's RAM must not stand in for it."""
    from dsguard.run.fit import fit_inputs

    path = _plan_job(tmp_path, "4GiB")
    text = path.read_text().replace("name: fake\n", "name: fake\ngpus: [0]\n")
    path.write_text(text)
    got = fit_inputs(load_job(path))
    assert isinstance(got, FitInputs)
    assert got.regime.device == "gpu" and got.available_bytes is None
    assert len(got.signature) == 32


CPU_OOM = (
    "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
    "allocate memory: you tried to allocate 200000000 bytes. Error code 12 (Cannot allocate "
    "memory)"
)


def test_a_bucket_sized_host_oom_shrinks_the_buckets_not_the_batch(tmp_path: Path) -> None:
    """The run_clm case: the failing allocation is the 5e7-element fp32 reduce bucket. No
    model shape is needed: the rendered DeepSpeed config says what the buckets are."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ds = tmp_path / "buckets.json"
    ds.write_text(json.dumps({"zero_optimization": {
        "stage": 2, "reduce_bucket_size": 50_000_000, "allgather_bucket_size": 50_000_000,
    }}))  # fmt: skip
    failing = Script(lines=((1.0, "step 0"), (2.0, CPU_OOM)), exit_code=1, exit_at_s=2.5)
    code, events, _ = _run(
        tmp_path, [failing, failing, _ok()], "no local model config",
        deepspeed={"config": str(ds)},
        train={"micro_batch_size": 8, "gradient_accumulation_steps": 1, "pin_memory": False},
    )  # fmt: skip
    assert code == 0
    first, second = _named(events, "evidence_considered")
    assert first["tried_bytes"] == second["tried_bytes"] == 200_000_000
    # Once proves little (the bucket may be the last straw): the batch is halved; the same
    # bucket-sized allocation at micro 4 too says the buffer is the problem.
    assert (first["rung"], second["rung"]) == ("micro_batch", "ds_buckets")
    started = _named(events, "attempt_started")
    assert [s["knobs"]["micro_batch_size"] for s in started] == [8, 4, 4]
    assert started[2]["knobs"]["ds_bucket_divisor"] == 2
    rendered = json.loads(Path(started[2]["deepspeed_config"]).read_text())
    assert rendered["zero_optimization"]["reduce_bucket_size"] == 25_000_000


def test_training_dtype_and_versions_come_from_the_job() -> None:
    from dsguard.run.fit import dtype_bytes, training_versions

    assert dtype_bytes(["--bf16"], None) == 2
    assert dtype_bytes(["--bf16", "--fp16", "false"], None) == 2
    assert dtype_bytes(["--fp16", "true"], None) == 2
    assert dtype_bytes(["--bf16", "false"], None) == 4
    assert dtype_bytes(["--bf16=False"], None) == 4
    assert dtype_bytes([], {"bf16": {"enabled": True}}) == 2
    assert dtype_bytes([], {"fp16": {"enabled": "auto"}}) == 4
    import sys

    versions = training_versions(sys.executable)  # the real interpreter, metadata only
    assert set(versions) == {"torch", "deepspeed", "transformers"}
    assert training_versions("/nonexistent/python") == {}


def test_a_known_good_config_is_applied_even_when_memory_is_unknown(tmp_path: Path) -> None:
    """The store's measurement needs no budget: a matching regime starts from it."""
    store = KnownGoodStore(tmp_path / "s.sqlite")
    good = Knobs(4, 4, zero_stage=2, gradient_checkpointing=False)
    store.record("sig", good.as_dict(), "fit", GIB, 3.0)
    facts = dataclasses.replace(_facts(40 * GIB), signature="sig", available_bytes=None)
    state = FitState(facts, store=store)
    from dsguard.core.rungs import RungContext
    from dsguard.job.knobs import DEFAULT_FLAGS

    ctx = RungContext(1, 256, dict(DEFAULT_FLAGS), has_deepspeed=True, can_start_phase=True,
                      exact_zero_transfer=True)  # fmt: skip
    plan = state.plan(Knobs(16, 1, zero_stage=2), ctx, fresh=True)
    assert plan.chosen is not None and plan.chosen.knobs == good and plan.source == "store"


#: A DeepSpeed op's JIT build under the job's RLIMIT_AS (a live P5 S1 run, attempt-1.log,
#: trimmed): the compiler ran out of address space, the training process (VmPeak 1.21 GiB,
#: budget 1.54 GiB) did not.
JIT_BUILD_OOM = (
    '  File "/venv/lib/python3.11/site-packages/deepspeed/comm/torch.py", line 51, in '
    "build_shm_op",
    "    shm_cpp_module = builder.load()",
    "RuntimeError: Error building extension 'deepspeed_shm_comm': [1/3] c++ -MMD -MF "
    "shm_interface.o.d -DTORCH_EXTENSION_NAME=deepspeed_shm_comm -fPIC -std=c++20 -O2 "
    "-c /venv/lib/python3.11/site-packages/deepspeed/ops/csrc/cpu/comm/shm_interface.cpp -o "
    "shm_interface.o",
    "FAILED: shm.o",
    "virtual memory exhausted: Cannot allocate memory",
    "ninja: build stopped: subcommand failed.",
)  # fmt: skip


def test_a_compiler_oom_in_an_op_build_gives_up_and_keeps_the_known_good_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15, live S1 warm run: the store's known-good config "ran out of memory" 7 times
    (buckets halved 6 times) because DeepSpeed rebuilt its shm op under the job's RLIMIT_AS
    (a torch_extensions cache shared with environments at other paths): no knob changes what
    the compiler needs. One failed attempt, a give-up that says so, and the store still knows
    the config fits (a recorded "oom" would make every later run plan past it)."""
    monkeypatch.setenv("DSGUARD_STORE", str(tmp_path / "store.sqlite"))
    facts = dataclasses.replace(_facts(1 * GIB), signature="regime-jit")  # nothing predicted
    fits = Script(lines=((1.0, "step 1"), (2.0, "done")), exit_at_s=2.5,
                  heartbeats=(Beat(at_s=2.0, step=2, gpu_mem_bytes=GIB),))  # fmt: skip
    oom = Script(lines=((1.0, "step 0"), (3.0, OOM)), exit_at_s=None)
    code, events, _ = _run(tmp_path / "one", [oom, fits], facts)
    assert code == 0
    good = _named(events, "attempt_started")[1]["knobs"]

    build = Script(lines=tuple((1.0 + i * 0.1, ln) for i, ln in enumerate(JIT_BUILD_OOM)),
                   exit_code=1, exit_at_s=2.0)  # fmt: skip
    code, events, _ = _run(tmp_path / "two", [build, build, build, _ok()], facts)
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store" and applied["knobs"] == good
    (failure,) = _named(events, "failure_detected")
    assert failure["kind"] == "ds_build_error"
    assert not _named(events, "policy_applied")  # no rung taken for the compiler's memory
    (gave_up,) = _named(events, "run_gave_up")
    assert "ran out of memory" in gave_up["reason"] and "TORCH_EXTENSIONS_DIR" in gave_up["reason"]
    assert len(_named(events, "attempt_started")) == 1
    code, events, _ = _run(tmp_path / "three", [_ok()], facts)
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store" and applied["knobs"] == good
