"""Issue 15 follow-ups: the store's environment fingerprint, calibration from the attempt's
process tree without heartbeats, a memory floor no move changes, bucket halvings against a
non-bucket allocation, and probe switches in the metrics (FakeHost; facts as plain values)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from dsguard.cli.main import main
from dsguard.job.file import load_job
from dsguard.run.fit import FitState, fit_inputs, training_environment
from dsguard.run.store import KnownGoodStore
from dsguard.testing import Beat, Script
from tests.test_fit_loop import GIB, OOM, _facts, _named, _ok, _plan_job, _run

# -- 1. the store sees the training environment -----------------------------------------------


def test_the_fingerprint_changes_when_a_package_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real interpreter, asked the way a run asks it; a distribution added to its path
    (as ``pip install datasets`` would) changes the fingerprint, not the three versions."""
    before = training_environment(sys.executable)
    assert len(before.fingerprint) == 16 and before.distributions > 0
    assert set(before.versions) == {"torch", "deepspeed", "transformers"}
    info = tmp_path / "fakepkg_dsguard_test-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg-dsguard-test\n"
                                   "Version: 1.0\n")  # fmt: skip
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    after = training_environment(sys.executable)
    assert after.versions == before.versions
    assert after.distributions == before.distributions + 1
    assert after.fingerprint != before.fingerprint
    assert training_environment("/nonexistent/python").fingerprint == ""


def _heal_once(tmp_path: Path, facts: object) -> dict[str, object]:
    """Run 1: nothing is predicted to fit, the ladder heals one OOM; the healed knobs."""
    oom = Script(lines=((1.0, "step 0"), (3.0, OOM)), exit_at_s=None)
    fits = Script(lines=((1.0, "step 1"), (2.0, "done")), exit_at_s=2.5,
                  heartbeats=(Beat(at_s=2.0, step=2, gpu_mem_bytes=GIB),))  # fmt: skip
    code, events, _ = _run(tmp_path, [oom, fits], facts)  # type: ignore[arg-type]
    assert code == 0
    healed: dict[str, object] = _named(events, "attempt_started")[1]["knobs"]
    return healed


def test_a_record_from_another_environment_is_a_hint_one_step_safer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The P5LIVE case: the venv changed between runs (the regime signature the same). The
    record from the old environment is not trusted as known-good: the plan starts one exact
    step safer than it, says so in ``plan_applied``; that run's outcome is recorded under the
    new environment, and the next run of it trusts it (``source: store``)."""
    monkeypatch.setenv("DSGUARD_STORE", str(tmp_path / "store.sqlite"))
    old = dataclasses.replace(_facts(1 * GIB), signature="regime", env_fingerprint="aaaa")
    healed = _heal_once(tmp_path / "one", old)

    new = dataclasses.replace(old, env_fingerprint="bbbb")
    code, events, _ = _run(tmp_path / "two", [_ok()], new)
    assert code == 0
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store_other_env"
    assert "another training environment" in applied["reason"]
    assert "fingerprint aaaa, this one bbbb" in applied["reason"]
    assert applied["knobs"] != healed and "step safer" in applied["reason"]
    started = _named(events, "attempt_started")
    assert [s["knobs"] for s in started] == [applied["knobs"]]
    safer = applied["knobs"]

    code, events, _ = _run(tmp_path / "three", [_ok()], new)
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store" and applied["knobs"] == safer
    # The old environment still trusts its own record.
    code, events, _ = _run(tmp_path / "four", [_ok()], old)
    (applied,) = _named(events, "plan_applied")
    assert applied["source"] == "store" and applied["knobs"] == healed


def test_an_old_store_without_the_column_is_migrated_and_read_as_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE attempts (signature TEXT NOT NULL, knobs TEXT NOT NULL, outcome TEXT "
        "NOT NULL, peak_bytes INTEGER, samples_per_s REAL, recorded_s REAL NOT NULL);"
        "INSERT INTO attempts VALUES ('sig', '{\"micro_batch_size\": 4}', 'fit', 7, 1.5, 1.0);"
    )
    con.commit()
    con.close()
    store = KnownGoodStore(path)
    (rec,) = store.lookup("sig")
    assert rec.env is None and rec.peak_bytes == 7
    store.record("sig", {"micro_batch_size": 2}, "fit", 5, 2.0, env="bbbb")
    assert [r.env for r in store.lookup("sig")] == [None, "bbbb"]
    facts = dataclasses.replace(_facts(40 * GIB), signature="sig", env_fingerprint="bbbb")
    state = FitState(facts, store=store)
    assert [k.micro_batch_size for k in state.known()] == [2]
    assert [k.micro_batch_size for k in state.hints()] == [4]
    # Where the environment cannot be asked, every record counts as this one's.
    blind = FitState(dataclasses.replace(facts, env_fingerprint=""), store=store)
    assert sorted(k.micro_batch_size for k in blind.known()) == [2, 4] and not blind.hints()


def test_plan_fit_shows_a_record_from_another_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSGUARD_STORE", str(tmp_path / "store.sqlite"))
    path = _plan_job(tmp_path, "4GiB")
    facts = fit_inputs(load_job(path))
    assert not isinstance(facts, str) and len(facts.env_fingerprint) == 16
    knobs = {**load_job(path).knobs.as_dict(), "micro_batch_size": 4,
             "gradient_accumulation_steps": 4}  # fmt: skip
    KnownGoodStore().record(facts.signature, knobs, "fit", GIB, 2.0, env="0123456789abcdef")
    assert main(["plan", "--fit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "first fit (store_other_env)" in out
    assert "1 config(s) recorded in another environment (0123456789abcdef)" in out
    assert main(["plan", "--fit", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["source"] == "store_other_env" and got["store"]["known"] == []
    assert got["store"]["other_env"][0]["env"] == "0123456789abcdef"
    assert got["store"]["env_fingerprint"] == facts.env_fingerprint
    assert got["chosen"]["knobs"] != knobs
