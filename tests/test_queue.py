"""``dsguard queue``: placement against a scripted NVML, the derived job files, and the real
daemon running real ``dsguard run`` children on CPU (heals, gives up, skips a dependent,
survives being killed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from dsguard.host.gpu import GpuProbe, Unknown
from dsguard.job.file import load_job
from dsguard.queue.alloc import Held, Placement, Wait, Want, place
from dsguard.queue.derive import Matrix, derive, read_raw, set_arg, with_gpus
from dsguard.queue.store import JobState, QueueError, Store
from dsguard.run.launch import build_command
from tests.conftest import dsguard_cmd, write_job
from tests.test_gpu import FakeNvml

GiB = 1 << 30


@pytest.fixture(autouse=True)
def qdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    qdir = tmp_path / "queue"
    monkeypatch.setenv("DSGUARD_QUEUE_DIR", str(qdir))
    return qdir


def nvml(*used: int, total: int = 80 * GiB) -> FakeNvml:
    return FakeNvml(
        [{"name": "NVIDIA H100", "total": total, "used": u, "util": 0,
          "procs": [(9000 + i, u)] if u else []} for i, u in enumerate(used)]
    )  # fmt: skip


def snap(fake: FakeNvml) -> Any:
    return GpuProbe(fake, sleep=lambda _s: None).snapshot()


# -- placement against a scripted NVML -------------------------------------------------------


def test_a_gpu_another_process_holds_is_not_handed_out() -> None:
    s = snap(nvml(30 * GiB, 0))
    assert place(Want(1), s, [], slots=1) == Placement((1,))
    wait = place(Want(2), s, [], slots=1)
    assert isinstance(wait, Wait) and not wait.impossible
    assert "GPU(s) [0] hold memory" in wait.reason


def test_gpus_are_exclusive_between_queue_jobs() -> None:
    s = snap(nvml(0, 0, 0))
    held = [Held((0, 2), None, None, slot=False)]
    assert place(Want(1), s, held, slots=1) == Placement((1,))
    assert isinstance(place(Want(2), s, held, slots=1), Wait)


def test_an_ended_jobs_gpu_waits_for_its_memory_to_be_released() -> None:
    fake = nvml(0, 12 * GiB)  # the killed attempt's rank still holds GPU 1 (driver teardown)
    wait = place(Want(2), snap(fake), [], slots=1)
    assert isinstance(wait, Wait) and "not released yet" in wait.reason
    fake.devices[1].update(used=0, procs=[])
    assert place(Want(2), snap(fake), [], slots=1) == Placement((0, 1))


def test_named_gpus_are_waited_for_not_substituted() -> None:
    s = snap(nvml(0, 30 * GiB, 0))
    assert place(Want(1, gpu_ids=(2,)), s, [], slots=1) == Placement((2,))
    assert isinstance(place(Want(1, gpu_ids=(1,)), s, [], slots=1), Wait)


def test_memory_fraction_jobs_share_a_gpu_until_it_is_full() -> None:
    fake = nvml(0, 0)
    held: list[Held] = []
    for _ in range(2):
        where = place(Want(1, gpu_fraction=0.5), snap(fake), held, slots=1)
        assert where == Placement((0,))
        held.append(Held((0,), 0.5, None, slot=False))
    fake.devices[0].update(used=70 * GiB)  # the two sharing jobs really use it
    assert place(Want(1, gpu_fraction=0.5), snap(fake), held, slots=1) == Placement((1,))
    # and an exclusive job never lands on the shared GPU, even when it looks free
    fake.devices[0].update(used=0)
    assert place(Want(1), snap(fake), held, slots=1) == Placement((1,))


def test_more_gpus_than_the_host_has_can_never_be_placed() -> None:
    wait = place(Want(3), snap(nvml(0, 0)), [], slots=1)
    assert isinstance(wait, Wait) and wait.impossible and "this host has 2" in wait.reason


def test_without_nvml_jobs_take_cpu_slots_and_host_memory() -> None:
    none = Unknown("no NVML library: no NVIDIA driver on this host", permanent=True)
    slot = Held((), None, 4 * GiB, slot=True)
    assert place(Want(1), none, [], slots=1) == Placement(None)
    assert isinstance(place(Want(1), none, [slot], slots=1), Wait)
    mem = (10 * GiB, 16 * GiB)
    assert place(Want(1, host_mem_bytes=8 * GiB), none, [slot], slots=2, mem=mem) == Placement(None)
    over = place(Want(1, host_mem_bytes=13 * GiB), none, [slot], slots=2, mem=mem)
    assert isinstance(over, Wait) and "host memory" in over.reason and not over.impossible
    never = place(Want(1, host_mem_bytes=20 * GiB), none, [], slots=2, mem=mem)
    assert isinstance(never, Wait) and never.impossible


def test_a_transient_nvml_failure_holds_gpu_jobs_back() -> None:
    blip = Unknown("NVML did not answer within 10 s (a wedged GPU?)")
    wait = place(Want(1), blip, [], slots=1)
    assert isinstance(wait, Wait) and "GPU state unknown" in wait.reason
    assert place(Want(0), blip, [], slots=1) == Placement(None)  # a CPU job still runs


# -- derived job files ------------------------------------------------------------------------


def test_matrix_values_become_named_jobs_with_their_own_dirs(tmp_path: Path) -> None:
    path = write_job(tmp_path, ["--ablation_config", "base"])
    job = load_job(path)
    m = Matrix.parse("ablation_config=profile_and_history,profile_and_context")
    docs = [derive(read_raw(path), job, name=f"fake-{v}", matrix=(m.key, v)) for v in m.values]
    out = tmp_path / "qjobs"
    out.mkdir()
    derived = []
    for doc in docs:
        f = out / f"{doc['name']}.yaml"
        f.write_text(yaml.safe_dump(doc))
        derived.append(load_job(f))
    assert [d.name for d in derived] == ["fake-profile_and_history", "fake-profile_and_context"]
    for d, v in zip(derived, m.values, strict=True):
        assert d.args[d.args.index("--ablation_config") + 1] == v
        assert d.checkpoints is not None and d.checkpoints.dir == tmp_path / "out" / v
        assert d.args[d.args.index("--output_dir") + 1] == str(tmp_path / "out" / v)
        assert d.log_dir == tmp_path / f"runs-{v}"
        assert d.workdir == job.workdir and d.script == job.script


def test_handed_out_gpus_reach_the_launch(tmp_path: Path) -> None:
    path = write_job(tmp_path, [], env={"CUDA_VISIBLE_DEVICES": "0"}, world_size=1)
    job = load_job(path)
    f = tmp_path / "derived.yaml"
    f.write_text(yaml.safe_dump(with_gpus(derive(read_raw(path), job), (3, 5))))
    derived = load_job(f)
    assert derived.gpus == (3, 5) and derived.world_size == 2
    cmd = build_command(derived, derived.knobs, run_id="r", attempt=1, base_env={},
                        ds_config=None, resume_from=None, output_dir=None)  # fmt: skip
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "3,5"


def test_set_arg_replaces_or_appends() -> None:
    assert set_arg(["--a", "1"], "--a", "2") == ["--a", "2"]
    assert set_arg(["--a=1", "x"], "--a", "2") == ["--a=2", "x"]
    assert set_arg(["x"], "--a", "2") == ["x", "--a", "2"]


def test_store_refuses_unknown_after_and_running_duplicates(qdir: Path) -> None:
    store = Store(qdir)
    row = {"name": "a", "source": "s", "job_file": "f", "job_yaml": "y", "log_dir": "l"}
    with pytest.raises(QueueError, match="no such job"):
        store.add([{**row, "after": "nope"}])
    store.add([row])
    with pytest.raises(QueueError, match="already in the queue"):
        store.add([row])
    store.update("a", state=JobState.GAVE_UP)
    store.add([row])  # a finished job added again runs again
    assert store.get("a") is not None and store.get("a").state is JobState.QUEUED  # type: ignore[union-attr]


# -- the real daemon, real dsguard run children -------------------------------------------------


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(dsguard_cmd(*args), capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def _job(root: Path, name: str, trainer: list[str], **sections: Any) -> Path:
    d = root / name
    d.mkdir()
    path = write_job(d, trainer, **sections)
    text = path.read_text().replace("name: fake", f"name: {name}")
    path.write_text(text)
    return path


def _status() -> dict[str, dict[str, Any]]:
    res = _cli("queue", "status", "--json")
    assert res.returncode == 0, res.stderr
    return {j["name"]: j for j in json.loads(res.stdout)["jobs"]}


def _trace(path: Path) -> list[dict[str, Any]]:
    t = path.parent / "trace.jsonl"
    return [json.loads(x) for x in t.read_text().splitlines()] if t.exists() else []


@pytest.mark.e2e
def test_queue_heals_one_gives_up_one_and_skips_its_dependent(tmp_path: Path, qdir: Path) -> None:
    heal = _job(tmp_path, "heal", ["--scenario", "oom", "--oom_above", "2", "--fail_at_step", "3"])
    bad = _job(tmp_path, "bad", ["--scenario", "user_error", "--fail_at_step", "1"])
    dep = _job(tmp_path, "dep", [])
    assert _cli("queue", "add", str(heal), str(bad)).returncode == 0
    res = _cli("queue", "add", str(dep), "--after", "bad")
    assert res.returncode == 0, res.stderr
    run = _cli("queue", "run", "--until-empty", "--slots", "2", timeout=240)
    assert run.returncode == 0, run.stderr
    st = _status()
    assert st["heal"]["state"] == "succeeded" and st["heal"]["starts"] == 1
    assert st["heal"]["run"]["attempt"] == 3
    assert st["heal"]["run"]["rung"] == "oom:micro_batch"  # halved twice on the first rung
    assert st["heal"]["run"]["checkpoint_step"] == 6  # its newest checkpoint-N (max_steps 6)
    assert isinstance(st["heal"]["run"]["checkpoint_age_s"], float)
    starts = [(r["micro"], r["accum"]) for r in _trace(heal) if r["event"] == "start"]
    assert starts == [(8, 1), (4, 2), (2, 4)]
    assert st["bad"]["state"] == "gave_up"
    assert st["dep"]["state"] == "skipped" and st["dep"]["starts"] == 0
    assert "after bad, which gave up" in st["dep"]["reason"]
    assert not (tmp_path / "dep" / "trace.jsonl").exists()
    table = _cli("queue").stdout
    assert "heal" in table and "succeeded" in table and "skipped" in table
    assert "oom:micro_batch" in table
    events = [json.loads(x) for x in (qdir / "events.jsonl").read_text().splitlines()]
    started = sorted(e["job"] for e in events if e["event"] == "queue_job_started")
    assert started == ["bad", "heal"]
    ended = {e["job"]: e["outcome"] for e in events if e["event"] == "queue_job_ended"}
    assert ended == {"heal": "succeeded", "bad": "gave_up"}
    skipped = [e for e in events if e["event"] == "queue_job_skipped"]
    assert [(e["job"], e["after"]) for e in skipped] == [("dep", "bad")]


def _wait_for(pred: Any, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def _daemon() -> subprocess.Popen[bytes]:
    return subprocess.Popen(dsguard_cmd("queue", "run", "--slots", "1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


@pytest.mark.e2e
def test_a_killed_daemon_restarted_adopts_the_running_job_and_runs_it_once(
    tmp_path: Path, qdir: Path
) -> None:
    slow = _job(tmp_path, "slow", ["--max_steps", "16", "--step_s", "0.25"])
    nxt = _job(tmp_path, "next", [])
    assert _cli("queue", "add", str(slow)).returncode == 0
    assert _cli("queue", "add", str(nxt), "--after", "slow").returncode == 0
    d1 = _daemon()
    try:
        _wait_for(lambda: any(r["event"] == "step" for r in _trace(slow)))
    finally:
        d1.send_signal(signal.SIGKILL)
        d1.wait()
    pid = _status()["slow"]["pid"]
    assert _status()["slow"]["state"] == "running" and pid is not None
    os.kill(pid, 0)  # its dsguard run lives on, in its own session
    run = _cli("queue", "run", "--until-empty", timeout=180)
    assert run.returncode == 0, run.stderr
    assert "slow: adopted" in run.stderr
    events = [json.loads(x) for x in (qdir / "events.jsonl").read_text().splitlines()]
    assert [e["job"] for e in events if e["event"] == "queue_job_adopted"] == ["slow"]
    st = _status()
    assert st["slow"]["state"] == "succeeded" and st["slow"]["starts"] == 1
    assert st["next"]["state"] == "succeeded"
    assert [r["event"] for r in _trace(slow)].count("start") == 1  # never started twice


@pytest.mark.e2e
def test_a_daemon_killed_with_its_job_resumes_the_job_at_its_rung(tmp_path: Path) -> None:
    job = _job(tmp_path, "rung", ["--scenario", "oom", "--oom_above", "4", "--fail_at_step", "3",
                                  "--max_steps", "20", "--step_s", "0.25"])  # fmt: skip
    assert _cli("queue", "add", str(job)).returncode == 0
    d1 = _daemon()
    try:
        _wait_for(
            lambda: (
                any(r["event"] == "step" and r.get("micro") == 4 for r in _trace(job))
                or [r.get("micro") for r in _trace(job) if r["event"] == "start"][-1:] == [4]
            )
        )
        time.sleep(1.0)
    finally:
        d1.send_signal(signal.SIGKILL)
        d1.wait()
    pid = _status()["rung"]["pid"]
    os.kill(pid, signal.SIGKILL)  # the whole box went down: dsguard run dies too
    _wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), timeout=30)
    run = _cli("queue", "run", "--until-empty", timeout=180)
    assert run.returncode == 0, run.stderr
    st = _status()["rung"]
    assert st["state"] == "succeeded" and st["starts"] == 2
    micros = [r["micro"] for r in _trace(job) if r["event"] == "start"]
    assert micros[0] == 8 and micros[1:] and set(micros[1:]) == {4}, micros  # never back to 8


@pytest.mark.e2e
def test_stopping_the_daemon_stops_its_jobs_in_order_and_the_next_daemon_resumes_them(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path, "long", ["--max_steps", "16", "--step_s", "0.25", "--save_steps", "2"])
    assert _cli("queue", "add", str(job)).returncode == 0
    d1 = _daemon()
    try:
        _wait_for(lambda: any(r["event"] == "step" and r["step"] >= 3 for r in _trace(job)))
        d1.send_signal(signal.SIGTERM)  # systemctl stop dsguard-queue
        assert d1.wait(timeout=90) == 0
    finally:
        if d1.poll() is None:
            d1.kill()
    st = _status()["long"]
    assert st["state"] == "queued" and "resumes at its rung" in st["reason"]
    assert st["run"]["state"] == "stopped"  # dsguard run stopped the attempt in order
    run = _cli("queue", "run", "--until-empty", timeout=180)
    assert run.returncode == 0, run.stderr
    st = _status()["long"]
    assert st["state"] == "succeeded" and st["starts"] == 2
    starts = [r for r in _trace(job) if r["event"] == "start"]
    assert len(starts) == 2 and starts[1]["resume"] is not None  # from its checkpoint


@pytest.mark.e2e
def test_a_job_cancelled_while_no_daemon_ran_is_ended_by_the_next_one(tmp_path: Path) -> None:
    job = _job(tmp_path, "orphan", ["--max_steps", "200", "--step_s", "0.25"])
    assert _cli("queue", "add", str(job)).returncode == 0
    d1 = _daemon()
    try:
        _wait_for(lambda: any(r["event"] == "step" for r in _trace(job)))
    finally:
        d1.send_signal(signal.SIGKILL)
        d1.wait()
    pid = _status()["orphan"]["pid"]
    assert _cli("queue", "cancel", "orphan").returncode == 0
    os.kill(pid, 0)  # still running: nobody has ended it yet
    run = _cli("queue", "run", "--until-empty", timeout=120)
    assert run.returncode == 0, run.stderr
    assert _status()["orphan"]["state"] == "cancelled"
    _wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), timeout=30)


@pytest.mark.e2e
def test_a_job_someone_already_supervises_is_adopted_not_started_twice(tmp_path: Path) -> None:
    job = _job(tmp_path, "byhand", ["--max_steps", "12", "--step_s", "0.25"])
    assert _cli("queue", "add", str(job)).returncode == 0
    by_hand = subprocess.Popen(dsguard_cmd("run", "--quiet", str(job)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _wait_for(lambda: any(r["event"] == "step" for r in _trace(job)))
        run = _cli("queue", "run", "--until-empty", timeout=120)
        assert run.returncode == 0, run.stderr
        assert f"pid {by_hand.pid} holds its job lock" in run.stderr
        assert by_hand.wait(timeout=60) == 0
    finally:
        if by_hand.poll() is None:
            by_hand.kill()
    st = _status()["byhand"]
    assert st["state"] == "succeeded" and st["starts"] == 0
    assert [r["event"] for r in _trace(job)].count("start") == 1


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.e2e
def test_cancel_and_a_bad_job_file_do_not_stop_the_queue(tmp_path: Path) -> None:
    ok = _job(tmp_path, "ok", [])
    gone = _job(tmp_path, "gone", [])
    assert _cli("queue", "add", str(ok), str(gone), "--priority", "1").returncode == 0
    assert _cli("queue", "cancel", "gone").returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntrain: {micro_batch_size: 0}\nscript: x.py\n")
    res = _cli("queue", "add", str(bad))
    assert res.returncode == 2 and "micro_batch_size" in res.stderr
    run = _cli("queue", "run", "--until-empty", timeout=120)
    assert run.returncode == 0, run.stderr
    st = _status()
    assert st["ok"]["state"] == "succeeded" and st["gone"]["state"] == "cancelled"
    assert "bad" not in st


def test_queue_run_refuses_a_second_daemon(qdir: Path) -> None:
    d1 = _daemon()
    try:
        _wait_for(lambda: (qdir / "daemon.lock").exists() and
                  (qdir / "daemon.lock").read_text().strip() != "", timeout=30)  # fmt: skip
        res = _cli("queue", "run", "--until-empty")
        assert res.returncode == 2 and "already runs" in res.stderr
    finally:
        d1.terminate()
        assert d1.wait(timeout=30) == 0


def _row(store: Store, name: str) -> Any:
    row = store.get(name)
    assert row is not None
    return row


@pytest.mark.e2e
def test_the_daemon_hands_out_gpus_and_waits_for_their_release(tmp_path: Path, qdir: Path) -> None:
    """Scripted NVML, real daemon pass by pass, real ``dsguard run`` children: GPU 0 is held
    by someone else; job a gets GPU 1; b waits; when a ends, GPU 1 still shows a's memory
    (the driver tearing the context down), so b waits until NVML shows it released."""
    from dsguard.queue.daemon import Daemon

    worker = Path(__file__).parent / "data" / "engines" / "gpu_env_worker.py"
    fake = nvml(30 * GiB, 0)
    store = Store(qdir)
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        job = {"name": name, "launcher": "python", "script": str(worker),
               "args": ["--out", str(d / "cvd"), "--go", str(d / "go")],
               "train": {"micro_batch_size": 1}, "log_dir": "runs"}  # fmt: skip
        (d / "job.yaml").write_text(yaml.safe_dump(job))
        assert _cli("queue", "add", str(d / "job.yaml")).returncode == 0
    daemon = Daemon(store, gpu=lambda: snap(fake), poll_s=0.1)

    def ends(name: str) -> bool:
        daemon.tick()
        return bool(_row(store, name).state is JobState.SUCCEEDED)

    daemon.tick()
    assert _row(store, "a").assigned == (1,)
    assert _row(store, "b").state is JobState.QUEUED
    assert "GPU(s) [0] hold memory" in (_row(store, "b").reason or "")
    _wait_for((tmp_path / "a" / "cvd").exists)
    assert (tmp_path / "a" / "cvd").read_text() == "1"
    fake.devices[1].update(used=20 * GiB, procs=[(4321, 20 * GiB)])  # a's rank, on GPU 1
    (tmp_path / "a" / "go").touch()
    _wait_for(lambda: ends("a"))
    daemon.tick()
    b = _row(store, "b")
    assert b.state is JobState.QUEUED and "not released yet" in (b.reason or "")
    fake.devices[1].update(used=0, procs=[])  # the driver let go
    daemon.tick()
    assert _row(store, "b").assigned == (1,)
    _wait_for((tmp_path / "b" / "cvd").exists)
    assert (tmp_path / "b" / "cvd").read_text() == "1"
    (tmp_path / "b" / "go").touch()
    _wait_for(lambda: ends("b"))
