"""``dsguard service install``: run a job under systemd, for the user or the system manager.

One template unit, ``dsguard@.service``, serves every job (instance name = job name); what
differs per job lives in a per-job environment file, ``%E/dsguard/NAME.env`` (``%E`` is
``$XDG_CONFIG_HOME`` for a user manager, ``/etc`` for the system one): the dsguard binary,
the job file, and the parts of the installing shell's environment that training needs.

The failure mode this is built against is "works in my shell, fails at 2 a.m. under
systemd": a service gets neither the login shell's ``PATH`` (conda/venv, ``nvcc``,
``ninja`` for DeepSpeed's JIT ops) nor ``CUDA_HOME``/``HF_HOME``. The install captures
those into the job's environment file, where they can be read and edited.

The second is a user service that silently dies with the SSH session: without lingering, a
user manager (and every unit in it) is stopped at logout, although ``systemctl --user
status`` looked fine while the user was logged in. The install result names the
``loginctl enable-linger`` command when lingering is off.

Nothing here runs ``systemctl``: the caller prints the commands, so installing never needs
a running systemd (or root, for a user install) and is testable in a temp dir.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dsguard.errors import DsguardError

UNIT_NAME = "dsguard@.service"
#: The unit's TimeoutStopSec, in seconds (kept in sync with UNIT_TEXT by a test).
UNIT_TIMEOUT_STOP_S = 90
#: What a stop takes besides stop_grace_s: SIGKILL reaping (10 s) and output drain (10 s).
STOP_OVERHEAD_S = 20
LINGER_DIR = Path("/var/lib/systemd/linger")

#: Variables copied from the installing shell into the job's environment file: what training
#: needs and a service does not get (see the module docstring). Secrets (HF_TOKEN, webhook
#: URLs) are never copied implicitly; add them to the file by hand (it is mode 0600).
CAPTURED_ENV: tuple[str, ...] = (
    "PATH",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_DATASETS_CACHE",
    "TRANSFORMERS_CACHE",
    "TORCH_HOME",
    "TORCH_EXTENSIONS_DIR",
    "TRITON_CACHE_DIR",
)
#: Prefixes of variables also copied (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...).
CAPTURED_PREFIXES: tuple[str, ...] = ("NCCL_",)

UNIT_TEXT = """\
# dsguard@.service: supervise one training job with dsguard; instance name = job name.
#
# Installed by `dsguard service install JOB.yaml [--user]`, which also writes the per-job
# environment file read below. By hand: copy this file to ~/.config/systemd/user/ (user
# manager) or /etc/systemd/system/ (system manager; add User= in a drop-in), and write
# %E/dsguard/NAME.env with DSGUARD_BIN=/abs/path/to/dsguard and DSGUARD_JOB=/abs/job.yaml.
# Change settings in a drop-in (`systemctl [--user] edit dsguard@NAME`), not in this file.

[Unit]
Description=dsguard: self-healing supervisor for training job %i
# Models and data often come from network mounts; multi-node NCCL needs the network.
# (In a user manager these system targets do not exist; both lines are then no-ops.)
After=network-online.target remote-fs.target
Wants=network-online.target
# A dsguard that keeps crashing is a bug to look at, not to retry all night.
StartLimitIntervalSec=1h
StartLimitBurst=5

[Service]
# dsguard sends READY=1 once the first attempt is spawned (not once training is healthy:
# loading a model can outlast any start timeout), STATUS= lines, WATCHDOG=1 pings, and
# STOPPING=1 plus EXTEND_TIMEOUT_USEC= while stopping.
Type=notify
# Only dsguard may notify; its children get an environment without NOTIFY_SOCKET.
NotifyAccess=main
# Per job: DSGUARD_BIN, DSGUARD_JOB and the shell environment training needs (PATH with
# the conda/venv, CUDA_HOME, HF_HOME, NCCL_*); a service does not get your login shell's.
# Not optional ("-"): without it there is no job, and the unit should fail saying so.
EnvironmentFile=%E/dsguard/%i.env
# /usr/bin/env because systemd does not expand variables in the executable path; env
# execs dsguard in place, so the main pid (notify, watchdog, SIGTERM) is dsguard's.
# --quiet: the job's output goes to log_dir/attempt-N.log, not into the journal too.
ExecStart=/usr/bin/env ${DSGUARD_BIN} run --quiet ${DSGUARD_JOB}
# The home dir, as in a login shell (the job's own paths resolve against the job file).
WorkingDirectory=~
# dsguard's event lines reach the journal as they happen, not when a buffer fills.
Environment=PYTHONUNBUFFERED=1
SyslogIdentifier=dsguard-%i
# Validation, checkpoint selection and the first spawn; not the model load (see READY).
TimeoutStartSec=5min
# dsguard's own liveness: it pings every WatchdogSec/2 from its main loop, so a wedged
# dsguard (deadlock, a blocked NVML call) is aborted and restarted. 3 min covers the
# longest blocking step with default limits (ending an attempt: 45 s + 10 s + 10 s).
WatchdogSec=3min
# systemd restarts dsguard if dsguard itself fails (crash, watchdog); dsguard restarts the
# job, and a restarted dsguard continues the ladder from state.json.
Restart=on-failure
RestartSec=30s
# Not when dsguard ended on purpose: 1 = gave up (a restart would repeat the same
# failure), 2 = bad job file or usage, or the job is already supervised (nothing launched).
RestartPreventExitStatus=1 2
# 130/143: stopped by SIGINT/SIGTERM after ending the job in order: a stop, not a failure
# (otherwise every `systemctl stop` would leave the unit "failed").
SuccessExitStatus=130 143
# Stop: SIGTERM to dsguard alone, which ends the attempt in order (SIGTERM to every rank,
# stop_grace_s, SIGKILL, reap) and records it; whatever is left in the cgroup after
# TimeoutStopSec gets SIGKILL. The default (control-group) would SIGTERM every rank at the
# same moment as dsguard, racing its shutdown and the launcher's own signal forwarding.
KillMode=mixed
KillSignal=SIGTERM
# > dsguard's stop_grace_s (45 s default) + SIGKILL reaping (10 s) + output drain (10 s)
# + margin. dsguard sends EXTEND_TIMEOUT_USEC while stopping, so a job with a longer
# stop_grace_s is not cut short either.
TimeoutStopSec=90s
# A rank killed by the kernel OOM killer is a job failure for dsguard to handle (the
# host_oom ladder); the default (stop) would take down dsguard and the whole job.
OOMPolicy=continue
# Ranks x DataLoader workers x threads can exceed the default per-unit task limit, and
# fork/thread creation then fails with EAGAIN, which looks like a bug in the training code.
TasksMax=infinity

# Hardening: only what cannot break training.
# Training never needs setuid binaries or to create setuid files.
NoNewPrivileges=yes
RestrictSUIDSGID=yes
LockPersonality=yes
# Deliberately not set, because each breaks real training jobs:
# - PrivateDevices=yes hides /dev/nvidia* (and /dev/infiniband).
# - ProtectHome=, ProtectSystem=strict: models, HF caches, torch extensions and
#   checkpoints live under home dirs and arbitrary mounts, and must stay writable.
# - PrivateTmp=yes, ProtectSystem=full: in a user manager these need a user namespace
#   (implied PrivateUsers=), which many GPU hosts disable (the unit then fails to start).
#   On a system unit ProtectSystem=full is safe to add in a drop-in.
# - PrivateIPC=yes: NCCL and DataLoader workers share memory through /dev/shm.
# - MemoryDenyWriteExecute=yes: CUDA, Triton and torch.compile generate code at run time.
# - LimitNOFILE=, LimitMEMLOCK=: kept as the manager's; raise them in a drop-in if your
#   shell has higher limits (LimitMEMLOCK=infinity for InfiniBand, system units only).
PrivateTmp=no

[Install]
# Started with the manager: at boot (system manager, or a user manager with lingering).
WantedBy=default.target
"""


class ServiceInstallError(DsguardError):
    """The service cannot be installed as asked (bad binary path, unrepresentable value)."""


@dataclass(frozen=True, slots=True)
class InstallResult:
    """What ``install`` wrote and what the user must run next."""

    job: str
    unit_path: Path
    #: "written" (new), "updated" (replaced with --force), "unchanged", or "kept" (an
    #: existing, different unit was left alone; see ``notes``).
    unit_action: str
    env_path: Path
    #: Per-instance drop-in with User=/Group= (system manager only), or None.
    dropin_path: Path | None
    #: Commands to run, in order.
    commands: tuple[str, ...]
    notes: tuple[str, ...]


def default_dsguard_bin() -> Path | None:
    """The ``dsguard`` entry point of the running installation (next to its interpreter),
    else the one on PATH. ``sys.argv[0]`` is no guide: under ``python -m dsguard`` it is
    ``__main__.py``."""
    beside = Path(sys.executable).parent / "dsguard"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("dsguard")
    return Path(found) if found else None


def _quote(key: str, value: str) -> str:
    """One ``KEY=value`` line that systemd's EnvironmentFile parser reads back exactly."""
    if "\n" in value or "\r" in value or "\0" in value:
        raise ServiceInstallError(f"{key}: a value with a line break cannot go into an env file")
    if "'" not in value:
        return f"{key}='{value}'"
    escaped = re.sub(r'(["\\`$])', r"\\\1", value)
    return f'{key}="{escaped}"'


def render_env_file(
    job_name: str, dsguard_bin: Path, job_path: Path, environ: Mapping[str, str]
) -> str:
    lines = [
        f"# Environment of dsguard@{job_name}.service, written by `dsguard service install`.",
        "# Edit freely (systemctl restart to apply); reinstalling rewrites this file.",
        "# Secrets (HF_TOKEN, ...) are never copied from your shell: add them here by hand.",
        _quote("DSGUARD_BIN", str(dsguard_bin)),
        _quote("DSGUARD_JOB", str(job_path)),
        "# Copied from the installing shell: a service does not get your login environment.",
    ]
    for key in sorted(environ):
        if key in CAPTURED_ENV or key.startswith(CAPTURED_PREFIXES):
            lines.append(_quote(key, environ[key]))
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _config_home(environ: Mapping[str, str]) -> Path:
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if xdg.startswith("/"):
        return Path(xdg)
    return Path(environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir) / ".config"


def _current_user(environ: Mapping[str, str]) -> str:
    return environ.get("SUDO_USER") or pwd.getpwuid(os.getuid()).pw_name


def _checked_binary(dsguard_bin: Path | None) -> Path:
    """The dsguard executable the unit will run, absolute: the service starts with another
    working directory and PATH, so a relative or missing binary would fail only at boot."""
    binary = dsguard_bin if dsguard_bin is not None else default_dsguard_bin()
    if binary is None:
        raise ServiceInstallError("cannot find the dsguard executable; pass its path")
    binary = binary.absolute()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise ServiceInstallError(f"{binary}: not an executable file")
    return binary


def _write_template_unit(
    unit_dir: Path,
    force: bool,
    notes: list[str],
    *,
    name: str = UNIT_NAME,
    text: str = UNIT_TEXT,
) -> tuple[Path, str]:
    """``(unit path, what was done)``. A unit that differs from this dsguard's is kept unless
    ``force``: the admin may have edited it, and overwriting would silently lose that."""
    unit_path = unit_dir / name
    try:
        existing: str | None = unit_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        existing = None
    if existing == text:
        unit_action = "unchanged"
    elif existing is None or force:
        _write_atomic(unit_path, text, 0o644)
        unit_action = "written" if existing is None else "updated"
    else:
        unit_action = "kept"
        notes.append(
            f"{unit_path} differs from this dsguard's unit and was left as it is; "
            "install with --force to replace it (edits there are lost; use drop-ins)"
        )
    return unit_path, unit_action


def _write_run_as_dropin(unit_dir: Path, job_name: str, who: str, notes: list[str]) -> Path | None:
    """System manager: a per-instance drop-in so the job runs as ``who``, not as root, and
    its checkpoints and logs belong to that user (root-owned ones the user could not clean up)."""
    if who == "root":
        notes.append("the job will run as root: pass a user to run it as another user")
        return None
    try:
        pw = pwd.getpwnam(who)
    except KeyError:
        raise ServiceInstallError(f"no such user: {who!r}") from None
    dropin_path = unit_dir / f"dsguard@{job_name}.service.d" / "10-user.conf"
    group = _group_name(pw.pw_gid)
    _write_atomic(
        dropin_path,
        "# Written by `dsguard service install`: the job runs as this user, not root.\n"
        f"[Service]\nUser={who}\nGroup={group}\n",
        0o644,
    )
    return dropin_path


def _user_manager_advice(
    env: Mapping[str, str],
    env_dir_default: bool,
    linger_dir: Path,
    commands: list[str],
    notes: list[str],
) -> None:
    """User manager: without lingering the job stops at the last logout, and a
    ``XDG_CONFIG_HOME`` the manager does not share makes it miss the env file."""
    who = _current_user(env)
    if not (linger_dir / who).exists():
        commands.append(f"loginctl enable-linger {shlex.quote(who)}")
        notes.append(
            "lingering is off: without `loginctl enable-linger` your user manager, and "
            "this job with it, stops when your last session ends (SSH logout)"
        )
    xdg = env.get("XDG_CONFIG_HOME", "")
    home_config = Path(env.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir) / ".config"
    if env_dir_default and xdg and _config_home(env) != home_config:
        notes.append(
            f"XDG_CONFIG_HOME={xdg}: make sure your systemd user manager has the same "
            "value, or it will look for the env file under ~/.config/dsguard"
        )


def install(
    job_path: Path,
    *,
    user: bool,
    dsguard_bin: Path | None = None,
    unit_dir: Path | None = None,
    env_dir: Path | None = None,
    run_as: str | None = None,
    force: bool = False,
    environ: Mapping[str, str] | None = None,
    linger_dir: Path = LINGER_DIR,
) -> InstallResult:
    """Write the template unit (if needed) and this job's environment file.

    Args:
        job_path: the job file; validated here, so a job that cannot run is not installed.
        user: install for the user's manager (``systemctl --user``), else the system's.
        dsguard_bin: the dsguard executable the service runs (default:
            :func:`default_dsguard_bin`).
        unit_dir / env_dir: where the unit and the env file go (defaults: the user's
            ``~/.config/systemd/user`` and ``~/.config/dsguard``, or ``/etc/systemd/system``
            and ``/etc/dsguard``). ``env_dir`` must be what ``%E/dsguard`` means to the manager.
        run_as: system manager only: the user the job runs as (default: ``$SUDO_USER`` or the
            current user); written as a per-instance drop-in. "root" writes none.
        force: replace an existing unit that differs from this dsguard's.
        environ: the environment to capture and to read XDG/HOME from (default: os.environ).
        linger_dir: where logind records lingering users (for the user-install note).

    Raises:
        JobFileError: the job file is invalid (the CLI prints it and exits 2).
        ServiceInstallError: no usable dsguard binary, or a value an env file cannot hold.
        OSError: a directory is not writable (e.g. /etc without root).
    """
    from dsguard.job.file import load_job

    env = os.environ if environ is None else environ
    job = load_job(job_path)
    job_file = job.source if job.source is not None else job_path.resolve()
    binary = _checked_binary(dsguard_bin)

    if unit_dir is None:
        unit_dir = _config_home(env) / "systemd" / "user" if user else Path("/etc/systemd/system")
    env_dir_default = env_dir is None
    if env_dir is None:
        env_dir = _config_home(env) / "dsguard" if user else Path("/etc/dsguard")
    notes: list[str] = []

    unit_path, unit_action = _write_template_unit(unit_dir, force, notes)
    env_path = env_dir / f"{job.name}.env"
    _write_atomic(env_path, render_env_file(job.name, binary, job_file, env), 0o600)

    dropin_path: Path | None = None
    if not user:
        dropin_path = _write_run_as_dropin(unit_dir, job.name, run_as or _current_user(env), notes)

    systemctl = "systemctl --user" if user else "systemctl"
    instance = f"dsguard@{job.name}"
    commands = [f"{systemctl} daemon-reload && {systemctl} enable --now {instance}"]
    if user:
        _user_manager_advice(env, env_dir_default, linger_dir, commands, notes)
    grace = job.limits.stop_grace_s
    if grace + STOP_OVERHEAD_S > UNIT_TIMEOUT_STOP_S:
        notes.append(
            f"stop_grace_s is {grace:g} s: dsguard extends the unit's {UNIT_TIMEOUT_STOP_S} s "
            "stop timeout while stopping (EXTEND_TIMEOUT_USEC)"
        )
    journal = "journalctl --user" if user else "journalctl"
    notes.append(
        f"follow it: {journal} -u {instance} -f; state: dsguard status {shlex.quote(str(job_file))}"
    )
    return InstallResult(
        job=job.name,
        unit_path=unit_path,
        unit_action=unit_action,
        env_path=env_path,
        dropin_path=dropin_path,
        commands=tuple(commands),
        notes=tuple(notes),
    )


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# -- issue 16: the queue daemon's unit -----------------------------------------------------------

QUEUE_UNIT_NAME = "dsguard-queue.service"
#: How long the queue daemon waits for its jobs' dsguard runs to save and stop
#: (``Daemon.stop_timeout_s``); the unit's TimeoutStopSec leaves room above it.
QUEUE_UNIT_TIMEOUT_STOP_S = 150

QUEUE_UNIT_TEXT = """\
# dsguard-queue.service: the dsguard queue daemon (`dsguard queue run`); each queued job runs
# as its own `dsguard run` child with its own lock, log dir and events.
#
# Installed by `dsguard service install --queue [--user]`, which also writes
# %E/dsguard/queue.env (DSGUARD_BIN, DSGUARD_QUEUE_DIR, DSGUARD_QUEUE_SLOTS and the shell
# environment training needs). Add jobs with `dsguard queue add JOB.yaml`; see them with
# `dsguard queue`. Change settings in a drop-in (`systemctl [--user] edit dsguard-queue`).

[Unit]
Description=dsguard queue: self-healing training jobs, one after another
After=network-online.target remote-fs.target
Wants=network-online.target
StartLimitIntervalSec=1h
StartLimitBurst=5

[Service]
Type=simple
EnvironmentFile=%E/dsguard/queue.env
ExecStart=/usr/bin/env ${DSGUARD_BIN} queue run --slots ${DSGUARD_QUEUE_SLOTS}
WorkingDirectory=~
Environment=PYTHONUNBUFFERED=1
SyslogIdentifier=dsguard-queue
# A crashed daemon is restarted; it adopts every job whose dsguard run still runs (the
# queue's SQLite record has its pid and start time) and starts again, at its ladder rung,
# every job whose dsguard run died with it.
Restart=on-failure
RestartSec=10s
# 2: another queue daemon already runs for this queue dir (a restart would not help).
RestartPreventExitStatus=2
# process: a restart (crash, watchdog) must not kill the jobs' dsguard runs with the daemon;
# the new daemon adopts them. A stop goes through the daemon: SIGTERM to it, it sends SIGTERM
# to each job's dsguard run (which saves and stops its attempt) and waits for them, and the
# jobs resume at their rungs at the next start.
KillMode=process
KillSignal=SIGTERM
# > the daemon's wait for its jobs to stop (120 s) + margin.
TimeoutStopSec=150s
# A rank killed by the OOM killer is a job failure for that job's dsguard to heal.
OOMPolicy=continue
TasksMax=infinity
NoNewPrivileges=yes
RestrictSUIDSGID=yes
LockPersonality=yes
# Not set, for the reasons given in dsguard@.service: PrivateDevices=, ProtectHome=,
# ProtectSystem=strict, PrivateTmp=, PrivateIPC=, MemoryDenyWriteExecute=.
PrivateTmp=no

[Install]
WantedBy=default.target
"""


def render_queue_env_file(
    dsguard_bin: Path, queue_dir: Path, slots: int, environ: Mapping[str, str]
) -> str:
    lines = [
        "# Environment of dsguard-queue.service, written by `dsguard service install --queue`.",
        "# Edit freely (systemctl restart to apply); reinstalling rewrites this file.",
        _quote("DSGUARD_BIN", str(dsguard_bin)),
        _quote("DSGUARD_QUEUE_DIR", str(queue_dir)),
        _quote("DSGUARD_QUEUE_SLOTS", str(slots)),
        "# Copied from the installing shell: a service does not get your login environment.",
    ]
    for key in sorted(environ):
        if key in CAPTURED_ENV or key.startswith(CAPTURED_PREFIXES):
            lines.append(_quote(key, environ[key]))
    return "\n".join(lines) + "\n"


def install_queue(
    *,
    user: bool,
    queue_dir: Path,
    slots: int = 1,
    dsguard_bin: Path | None = None,
    unit_dir: Path | None = None,
    env_dir: Path | None = None,
    force: bool = False,
    environ: Mapping[str, str] | None = None,
    linger_dir: Path = LINGER_DIR,
) -> InstallResult:
    """Write ``dsguard-queue.service`` and ``%E/dsguard/queue.env`` (see :func:`install`).

    Raises:
        ServiceInstallError: no usable dsguard binary, or a value an env file cannot hold.
        OSError: a directory is not writable.
    """
    env = os.environ if environ is None else environ
    binary = _checked_binary(dsguard_bin)
    if unit_dir is None:
        unit_dir = _config_home(env) / "systemd" / "user" if user else Path("/etc/systemd/system")
    env_dir_default = env_dir is None
    if env_dir is None:
        env_dir = _config_home(env) / "dsguard" if user else Path("/etc/dsguard")
    notes: list[str] = []
    unit_path, action = _write_template_unit(
        unit_dir, force, notes, name=QUEUE_UNIT_NAME, text=QUEUE_UNIT_TEXT
    )
    env_path = env_dir / "queue.env"
    _write_atomic(env_path, render_queue_env_file(binary, queue_dir.absolute(), slots, env), 0o600)
    systemctl = "systemctl --user" if user else "systemctl"
    commands = [f"{systemctl} daemon-reload && {systemctl} enable --now dsguard-queue"]
    if user:
        _user_manager_advice(env, env_dir_default, linger_dir, commands, notes)
    notes.append("add jobs: dsguard queue add JOB.yaml; see them: dsguard queue")
    return InstallResult(
        job="(queue)", unit_path=unit_path, unit_action=action, env_path=env_path,
        dropin_path=None, commands=tuple(commands), notes=tuple(notes),
    )  # fmt: skip
