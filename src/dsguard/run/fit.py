"""Gather what the first-fit plan needs for a job (file and device reads), then plan.

The decision is pure (:func:`dsguard.core.fit.plan_fit`); this module reads the facts: the
model's shape (``host.modelshape``), the memory available (NVML total minus other processes'
use on the job's GPUs, times ``resources.gpu_memory_fraction``; or the host's: the job's
``resources.host_memory_limit``, the memory cgroup's limit, the RAM), the training dtype and
attention implementation from the job's arguments and DeepSpeed config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsguard.core.estimate import Regime, ds_buffers, estimate
from dsguard.core.evidence import MoveEvidence, parse_oom
from dsguard.core.fit import (
    Candidate,
    FitInputs,
    FitPlan,
    KnownOutcome,
    fits,
    plan_fit,
    relative_step_time,
)  # fmt: skip
from dsguard.core.ladder import PolicyConfig
from dsguard.core.rungs import RungContext
from dsguard.core.throughput import ProbeChoice, choose_probe
from dsguard.host.modelshape import read_model_shape
from dsguard.job.argv import flag_value
from dsguard.job.knobs import Knobs
from dsguard.job.model import Job
from dsguard.run.events import EventLog
from dsguard.run.store import KnownGoodStore, Outcome, StoreUnavailable, signature, summarize

#: Values of a boolean flag that mean "on" (HF's argument parser accepts these).
_TRUE = frozenset({"true", "1", "yes", "on"})


def _flag_on(args: Sequence[str], flag: str) -> bool:
    if flag in args:
        i = list(args).index(flag)
        nxt = args[i + 1] if i + 1 < len(args) else ""
        return nxt.startswith("--") or nxt == "" or nxt.lower() in _TRUE
    value = flag_value(args, flag)
    return value is not None and value.lower() in _TRUE


def dtype_bytes(args: Sequence[str], ds: Mapping[str, Any] | None) -> int:
    """2 when the job trains in mixed precision (``--bf16``/``--fp16`` or the DeepSpeed
    config's ``bf16``/``fp16`` enabled), else 4 (fp32: HF Trainer's default)."""
    if _flag_on(args, "--bf16") or _flag_on(args, "--fp16"):
        return 2
    for key in ("bf16", "fp16"):
        block = (ds or {}).get(key)
        if isinstance(block, Mapping) and block.get("enabled") is True:
            return 2
    return 4


def gpu_available_bytes(job: Job) -> tuple[int | None, bool, str]:
    """(bytes free for one rank on the tightest of the job's GPUs, whether any GPU exists,
    the GPU's name and total memory for the regime signature).

    Free = total minus what other processes hold (NVML), times the job's memory fraction."""
    from dsguard.host.gpu import GpuSnapshot, snapshot

    snap = snapshot(timeout_s=10.0)
    if not isinstance(snap, GpuSnapshot) or not snap.devices:
        return None, False, ""
    wanted = set(job.gpus) if job.gpus else {d.index for d in snap.devices}
    frees: list[tuple[int, str]] = []
    for dev in snap.devices:
        if dev.index not in wanted or dev.total_bytes is None:
            continue
        held = sum(p.used_bytes or 0 for p in dev.processes or ())
        free = dev.total_bytes - held
        if job.resources.gpu_memory_fraction is not None:
            free = min(free, int(dev.total_bytes * job.resources.gpu_memory_fraction))
        frees.append((free, f"{dev.name} {dev.total_bytes}"))
    if not frees:
        return None, True, ""
    free, desc = min(frees)
    return free, True, desc


#: Asked of the training interpreter (no torch import: metadata only, milliseconds): the three
#: versions the regime signature names, and the fingerprint of the whole environment: a hash
#: of every installed distribution's ``name==version`` (names normalised as PEP 503 does),
#: sorted. The signature's versions miss a change like ``datasets`` installed into the venv,
#: which the HF Trainer then imports (+1.27 GiB address space, +108 MiB resident measured,
#: ``bench/RESULTS.md`` P5LIVE); the fingerprint sees it. dsguard itself is left out: an
#: upgrade of the supervisor must not turn every known-good record into a mere hint.
_VERSIONS_CODE = (
    "import hashlib, importlib.metadata as m, re\n"
    "for n in ('torch', 'deepspeed', 'transformers'):\n"
    "    try: print(n, m.version(n))\n"
    "    except Exception: print(n, '-')\n"
    "names = ((re.sub(r'[-_.]+', '-', d.metadata['Name'] or '?').lower(), str(d.version))\n"
    "         for d in m.distributions())\n"
    "ds = sorted({f'{n}=={v}' for n, v in names if n != 'dsguard'})\n"
    "print('env', hashlib.sha256('\\n'.join(ds).encode()).hexdigest()[:16], len(ds))\n"
)


@dataclass(frozen=True, slots=True)
class TrainingEnv:
    """What the training interpreter says of its environment (empty: it could not be asked)."""

    versions: dict[str, str] = field(default_factory=dict)
    #: 16 hex digits over the sorted ``name==version`` of every distribution; "" unknown.
    fingerprint: str = ""
    distributions: int = 0


def training_environment(python: str) -> TrainingEnv:
    """torch / DeepSpeed / transformers versions and the environment fingerprint."""
    import subprocess

    try:
        out = subprocess.run(
            [python, "-c", _VERSIONS_CODE], capture_output=True, text=True, timeout=30,
            check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return TrainingEnv()
    fields = [line.split(" ") for line in out.splitlines()]
    versions = {f[0]: f[1] for f in fields if len(f) == 2}
    env = next((f for f in fields if len(f) == 3 and f[0] == "env"), None)
    if env is None or not env[2].isdigit():
        return TrainingEnv(versions)
    return TrainingEnv(versions, env[1], int(env[2]))


def training_versions(python: str) -> dict[str, str]:
    """torch / DeepSpeed / transformers versions of the training environment ({} unknown)."""
    return training_environment(python).versions


def host_available_bytes(job: Job) -> int | None:
    from dsguard.host.memory import memory_limit_bytes

    limits = [v for v in (job.resources.host_memory_limit_bytes, memory_limit_bytes()) if v]
    return min(limits) if limits else None


def fit_inputs(job: Job, *, scale: float = 1.0) -> FitInputs | str:
    """Everything :func:`plan_fit` needs, or why the plan cannot be made."""
    shape, where = read_model_shape(job.args, job.workdir)
    if shape is None:
        return where
    gpu_free, has_gpu, gpu_desc = gpu_available_bytes(job)
    # A job that names GPUs trains on them even where this command cannot see them (a login
    # node): its budget is then unknown, not the host's memory.
    has_gpu = has_gpu or bool(job.gpus)
    host_free = host_available_bytes(job)
    ds = job.deepspeed.base if job.deepspeed is not None else None
    attn = flag_value(job.args, "--attn_implementation")
    lora_r = flag_value(job.args, "--lora_r") or flag_value(job.args, "--lora_rank")
    regime = Regime(
        device="gpu" if has_gpu else "cpu",
        world_size=job.world_size,
        dtype_bytes=dtype_bytes(job.args, ds),
        efficient_attention=attn is None or attn != "eager",
        uses_deepspeed=job.deepspeed is not None,
        lora_rank=int(lora_r) if lora_r and lora_r.isdigit() else 8,
        buffers=ds_buffers(ds, shape.hidden_size),
    )
    per_rank_host = None if host_free is None else host_free // max(1, job.world_size)
    env = training_environment(job.python)
    parts = {
        "model": {k: v for k, v in dataclasses.asdict(shape).items() if k != "source"},
        "params": shape.param_count(),
        "memory": gpu_desc if has_gpu else f"host {host_free}",
        "world_size": job.world_size, "dtype_bytes": regime.dtype_bytes,
        "attention": attn or "default", "knobs": job.knobs.as_dict(),
        "deepspeed": ds, "versions": env.versions,
    }  # fmt: skip
    return FitInputs(
        shape=shape, regime=regime,
        available_bytes=gpu_free if has_gpu else host_free,
        host_available_bytes=per_rank_host if has_gpu else None,
        scale=scale, rungs=(*job.ladder.oom, *job.ladder.host_oom),
        signature=signature(parts), env_fingerprint=env.fingerprint,
    )  # fmt: skip


def plan_for(job: Job, *, fresh: bool = True) -> tuple[FitPlan, FitState]:
    """The first-fit plan for ``job`` from its knobs, and the state it came from (its
    store's knowledge and problems: ``dsguard plan --fit`` shows both).

    ``fresh``: nothing is resumed, so a ZeRO stage change costs nothing (no checkpoint of
    the old stage exists); otherwise only moves the ladder itself would allow are planned.
    """
    state = start_fit_state(job)
    ctx = PolicyConfig.from_job(job).ctx
    if fresh:
        ctx = dataclasses.replace(ctx, can_start_phase=True, exact_zero_transfer=True)
    return state.plan(job.knobs, ctx, fresh=fresh), state


#: Element sizes a DeepSpeed buffer may be allocated in (fp16/bf16, fp32).
_ELEMENT_BYTES = (2, 4)


@dataclass
class FitState:
    """The run's estimator: the facts gathered once at the start, the scale calibrated on
    measured peaks, and the failing allocations seen so far (for :mod:`core.evidence`)."""

    inputs: FitInputs | None
    #: Why there is no estimator (``inputs`` None).
    unavailable: str = ""
    scale: float = 1.0
    earlier: list[tuple[int, int]] = field(default_factory=list)
    #: (micro-batch, bucket divisor, failing allocation) of the same failures.
    halvings: list[tuple[int, int, int]] = field(default_factory=list)
    #: The known-good store, or None (no signature, or unusable: ``store_problem`` says why).
    store: KnownGoodStore | None = None
    store_problem: str | None = None
    store_problem_noted: bool = False
    #: Host RSS measures what limits the job (a cgroup or the RAM). Under RLIMIT_AS
    #: (``resources.host_memory_limit``) the limit is virtual memory, which RSS understates:
    #: calibrating a CPU estimate on RSS would then shrink it below what fails.
    rss_comparable: bool = True
    #: ``fit_probe`` is on, and the probe this run started at (None: no probe).
    probe_enabled: bool = False
    probe: ProbeChoice | None = None

    def predict(self, knobs: Knobs) -> int | None:
        if self.inputs is None:
            return None
        return estimate(self.inputs.shape, knobs, self.inputs.regime, scale=self.scale).peak_bytes

    def plan(self, start: Knobs, ctx: RungContext, *, fresh: bool) -> FitPlan:
        if self.inputs is None:
            return FitPlan(
                start, "unknown", None, 0.0, note=f"model shape unknown: {self.unavailable}"
            )
        inputs = dataclasses.replace(self.inputs, scale=self.scale, fresh=fresh)
        known = self.known()
        plan = plan_fit(start, ctx, inputs, known, self.hints())
        if self.probe_enabled and fresh:
            return self._with_probe(plan, inputs, known, ctx.min_micro_batch_size)
        return plan

    def _with_probe(
        self,
        plan: FitPlan,
        inputs: FitInputs,
        known: Mapping[Knobs, KnownOutcome],
        min_micro: int,
    ) -> FitPlan:
        """``fit_probe``: start at an unmeasured neighbour of the fastest measured config
        instead (``core.throughput.choose_probe``); the plan unchanged when there is none."""
        measured = {k: v.samples_per_s for k, v in known.items() if v.fits and v.samples_per_s}
        failed = {k for k, v in known.items() if not v.fits}

        def predicted_fit(k: Knobs) -> bool:
            est = estimate(inputs.shape, k, inputs.regime, scale=inputs.scale)
            return fits(est, inputs.available_bytes, inputs.margin, inputs.host_available_bytes)

        choice = choose_probe(measured, failed, predicted_fit, min_micro=min_micro)
        if choice is None:
            return plan
        self.probe = choice
        est = estimate(inputs.shape, choice.knobs, inputs.regime, scale=inputs.scale)
        cand = Candidate(
            choice.knobs, ("fit_probe",), est,
            relative_step_time(plan.start, choice.knobs, inputs.regime.device), True,
        )  # fmt: skip
        note = (
            f"probe of the {choice.direction} micro-batch next to the fastest known config "
            f"({choice.baseline_samples_per_s:.3g} samples/s measured)"
        )
        return dataclasses.replace(plan, chosen=cand, source="probe", note=note)

    def probe_fits(self, ran: Knobs) -> Callable[[Knobs], bool]:
        """The in-run probe's fit test (``fit_probe: in_run``): the estimate, calibrated on
        the peaks measured so far, when there is one. Without it (the model's shape unknown)
        only a micro-batch no larger than the one that ran is allowed: same weights and
        optimizer state, fewer activations, so it needs no more memory."""
        inputs, scale = self.inputs, self.scale

        def ok(k: Knobs) -> bool:
            if inputs is None:
                return k.micro_batch_size <= ran.micro_batch_size
            est = estimate(inputs.shape, k, inputs.regime, scale=scale)
            return fits(est, inputs.available_bytes, inputs.margin, inputs.host_available_bytes)

        return ok

    def known(self) -> dict[Knobs, KnownOutcome]:
        """What the store knows of this regime in this training environment ({} without a
        usable store)."""
        return self._outcomes(same_env=True)

    def hints(self) -> dict[Knobs, KnownOutcome]:
        """What the store knows of this regime from other training environments (or from
        records without a fingerprint, an older store): hints for the plan, not known-good."""
        return self._outcomes(same_env=False)

    def _outcomes(self, *, same_env: bool) -> dict[Knobs, KnownOutcome]:
        if self.store is None or self.inputs is None or not self.inputs.signature:
            return {}
        try:
            records = self.store.lookup(self.inputs.signature)
        except StoreUnavailable as exc:
            self._lose_store(str(exc))
            return {}
        here = self.inputs.env_fingerprint
        # An unknown current environment cannot tell records apart: all count as this one.
        picked = [r for r in records if (not here or r.env == here) == same_env]
        out: dict[Knobs, KnownOutcome] = {}
        for entry in summarize(picked).values():
            try:
                knobs = Knobs.from_dict(entry["knobs"])
            except (TypeError, ValueError):
                continue
            out[knobs] = KnownOutcome(
                entry["outcome"] == "fit", entry["samples_per_s"], entry["peak_bytes"],
                entry["env"],
            )  # fmt: skip
        return out

    def remember(self, knobs: Knobs, outcome: Outcome, peak: int | None, sps: float | None) -> None:
        """Record an attempt's outcome for later runs of the same regime (and environment)."""
        if self.store is None or self.inputs is None or not self.inputs.signature:
            return
        env = self.inputs.env_fingerprint or None
        try:
            self.store.record(self.inputs.signature, knobs.as_dict(), outcome, peak, sps, env=env)
        except StoreUnavailable as exc:
            self._lose_store(str(exc))

    def _lose_store(self, why: str) -> None:
        self.store, self.store_problem = None, why

    def evidence(
        self, lines: Sequence[str], knobs: Knobs, ds: Mapping[str, Any] | None
    ) -> MoveEvidence:
        """The evidence of a memory failure at ``knobs``; remembers its failing allocation."""
        figures = parse_oom(lines)
        hidden = None if self.inputs is None else self.inputs.shape.hidden_size
        buffers = ds_buffers(ds, hidden) if ds is not None else None
        sizes: tuple[int, ...] = ()
        if buffers is not None:
            sizes = tuple(
                e * n for n in (buffers.reduce_bucket, buffers.allgather_bucket,
                                buffers.prefetch_bucket) for e in _ELEMENT_BYTES
            )  # fmt: skip
        ev = MoveEvidence(
            figures=figures, earlier=tuple(self.earlier), bucket_bytes=sizes,
            predict=None if self.inputs is None else self._predict_unchecked,
            device=self.inputs.regime.device if self.inputs is not None else "gpu",
            halvings=tuple(self.halvings),
        )  # fmt: skip
        if figures is not None and figures.tried_bytes is not None:
            self.earlier.append((knobs.micro_batch_size, figures.tried_bytes))
            self.halvings.append(
                (knobs.micro_batch_size, knobs.ds_bucket_divisor, figures.tried_bytes)
            )
        return ev

    def _predict_unchecked(self, knobs: Knobs) -> int:
        value = self.predict(knobs)
        assert value is not None
        return value

    def calibrate(
        self,
        knobs: Knobs,
        gpu_peak: int | None,
        host_peak: int | None,
        *,
        lower_bound: bool = False,
        host_measure: str = "host_rss",
    ) -> tuple[int, int, str] | None:
        """Measured against predicted (unscaled) peak of ``knobs``; sets the scale. Returns
        (predicted, measured, what was measured), or None when there is nothing to compare.
        ``lower_bound``: the attempt died of memory, so the measured peak is less than the
        need; only a measurement above the scaled prediction moves the scale (up).
        ``host_measure``: what ``host_peak`` is; a heartbeat's ``host_rss`` counts only where
        resident memory is what is limited, dsguard's outside measures (``vm_peak``,
        ``cgroup_peak``, ``vm_hwm``) are chosen to match the limit (``run.observe``)."""
        if self.inputs is None:
            return None
        est = estimate(self.inputs.shape, knobs, self.inputs.regime)
        if est.gpu is not None:
            measured, what, predicted = gpu_peak, "max_memory_reserved", est.gpu.total
        elif self.rss_comparable or host_measure != "host_rss":
            measured, what, predicted = host_peak, host_measure, est.host.total
        else:
            return None
        if not measured or predicted <= 0:
            return None
        if lower_bound and measured <= predicted * self.scale:
            return None
        self.scale = measured / predicted
        return predicted, measured, what


def start_fit_state(
    job: Job,
    gather: Callable[[Job], FitInputs | str] = fit_inputs,
    store: KnownGoodStore | None = None,
) -> FitState:
    """Gather the estimator's facts once per run (never raises: a plan is an optimisation)."""
    try:
        got = gather(job)
    except Exception as exc:  # a planning bug must not keep training from starting
        return FitState(None, f"planning failed: {type(exc).__name__}: {exc}")
    if isinstance(got, str):
        return FitState(None, got)
    return FitState(
        got,
        store=store or KnownGoodStore(),
        rss_comparable=job.resources.host_memory_limit_bytes is None,
        probe_enabled=job.fit_probe,
    )


def emit_plan(
    events: EventLog, plan: FitPlan, job_knobs: Knobs, probe: ProbeChoice | None = None
) -> None:
    """``plan_applied`` when the start config was replaced, ``plan_skipped`` with the why."""
    start = plan.start_candidate
    chosen = plan.chosen
    if chosen is None or start is None:
        events.emit(
            "plan_skipped", reason=plan.note,
            predicted_peak_bytes=None if start is None else start.estimate.peak_bytes,
            available_bytes=plan.available_bytes,
        )  # fmt: skip
        return
    events.emit(
        "plan_applied", source=plan.source, changes=job_knobs.diff(chosen.knobs),
        knobs=chosen.knobs.as_dict(), path=list(chosen.path),
        predicted_peak_bytes=chosen.estimate.peak_bytes,
        start_predicted_peak_bytes=start.estimate.peak_bytes,
        available_bytes=plan.available_bytes, margin=plan.margin, device=plan.device,
        relative_step_time=round(chosen.step_time, 3),
        reason=_REASONS[plan.source] + plan.note,
    )  # fmt: skip
    if plan.source == "probe" and probe is not None:
        events.emit(
            "fit_probe_planned", knobs=probe.knobs.as_dict(), direction=probe.direction,
            baseline_knobs=probe.baseline.as_dict(),
            baseline_samples_per_s=round(probe.baseline_samples_per_s, 4),
            predicted_peak_bytes=chosen.estimate.peak_bytes,
            available_bytes=plan.available_bytes,
        )  # fmt: skip


#: The ``plan_applied`` reason's opening, by where the chosen config came from.
_REASONS: dict[str, str] = {
    "estimate": "the start config is predicted not to fit; ",
    "store": "an earlier run of this regime measured it: ",
    "probe": "fit_probe: the store's speed of this config is unknown; ",
    "store_other_env": "the store knows this regime only from another training environment "
    "(installed packages differ): a hint, not known-good; ",
}
