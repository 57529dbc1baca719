"""ZeRO-stage transplant and consolidated weights, on real DeepSpeed + HF Trainer (CPU, fp32).

Every training run is a fresh ``python tests/zero_trainer_script.py`` process (a DeepSpeed
world of size 1 on gloo; one case launches 2 ranks with ``torch.distributed.run``): a resume
must happen in a new process anyway (ZeRO-3 cannot load right after saving in the same
engine), and it is what dsguard does on a ladder move. Runs are made on demand and shared by
the tests of this module: 14 processes of 8-21 s, about 3.5 minutes on 2 cores once
DeepSpeed's CPU comm op (``deepspeed_shm_comm``) is JIT-built; the first run on a fresh machine
builds it (about 80 s here). Resumed runs initialise the model from another seed, so every
tensor the continuation uses must come from the checkpoint.

The exactness claim is checked on per-micro-batch losses at full precision: a run resumed at
step K under another stage must reproduce the uninterrupted run's losses for steps K+1..M.
Tolerance: relative 1e-6. fp32 on CPU, the transplant reproduces them to the bit or to one
float32 ulp (measured max 1.7e-7 relative, ZeRO-3 -> ZeRO-2; one ulp at a loss of 2.8 is
8.5e-8 relative), the same noise an *uninterrupted* ZeRO-2 vs ZeRO-3 pair shows (8.6e-8: the
stages order a few reductions differently). The tolerance still discriminates: resuming with
the right weights and moments but the scheduler's initial LR is off by 1.8e-3 relative, with
zeroed Adam moments by 2.0e-3. Final weights: absolute 1e-5 (measured max 9.0e-7; the
uninterrupted ZeRO-2 vs ZeRO-3 pair differs by 3.8e-6: Adam amplifies ulp-level gradient
differences where its second moment is tiny).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepspeed")
pytest.importorskip("transformers")

import torch

from dsguard.integrations import zero
from dsguard.integrations.zero import (
    CONSOLIDATED_SUBDIR,
    UNIVERSAL_SUBDIR,
    WeightsMismatchError,
    ZeroTransplantError,
    checkpoint_zero_stage,
    enable_zero_transplant,
    load_consolidated_weights,
)

pytestmark = pytest.mark.train

SCRIPT = Path(__file__).parent / "zero_trainer_script.py"
K = 3  # the checkpoint resumed from
M = 6  # max_steps of every run
LOSS_RTOL = 1e-6
WEIGHT_ATOL = 1e-5
RUN_TIMEOUT_S = 280
TRANSPLANT_LINE = "dsguard: transplanted ZeRO-"
ORIGINAL_ERROR = "assert len(self.ckpt_list) > 0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Run:
    name: str
    out: Path
    returncode: int
    log: str
    seconds: float
    losses: dict[str, list[float]] = field(default_factory=dict)
    weights: dict[str, torch.Tensor] = field(default_factory=dict)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.splitlines()[-n:])


def _hash_tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


class Runs:
    """Training runs made on first use and cached for the whole module."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache: dict[str, Run] = {}
        #: sha256 of every file of the baselines' checkpoint-K, taken right after saving.
        self.original_hashes: dict[str, dict[str, str]] = {}

    def _run(self, name: str, *args: str, world: int = 1) -> Run:
        if name in self.cache:
            return self.cache[name]
        out = self.root / name
        env = {k: v for k, v in os.environ.items() if k not in _DIST_ENV}
        env["PYTHONUNBUFFERED"] = "1"
        port = str(_free_port())
        if world == 1:  # DeepSpeed's init_distributed on gloo, one process
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK="0", LOCAL_RANK="0")
            env["WORLD_SIZE"] = "1"
            cmd = [sys.executable, str(SCRIPT)]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world)]
            cmd += ["--master_addr", "127.0.0.1", "--master_port", port, str(SCRIPT)]
        losses = self.root / f"{name}.losses.json"
        weights = self.root / f"{name}.weights.pt"
        cmd += ["--output_dir", str(out), *args]
        cmd += ["--losses_out", str(losses), "--weights_out", str(weights)]
        t0 = time.monotonic()
        proc = subprocess.run(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        run = Run(name, out, proc.returncode, proc.stdout, time.monotonic() - t0)
        (self.root / f"{name}.log").write_text(proc.stdout)
        if losses.exists():
            run.losses = json.loads(losses.read_text())
        if weights.exists():
            run.weights = torch.load(weights, weights_only=True)
        self.cache[name] = run
        print(f"[zero-transplant] {name}: rc={run.returncode} {run.seconds:.1f}s")
        return run

    def baseline(self, case: Case) -> Run:
        """Uninterrupted run of M steps at ``case.src``'s stage, checkpoints at K and M."""
        name = f"base-z{case.src}{case.variant}"
        fresh = name not in self.cache
        args = ["--stage", str(case.src), "--max_steps", str(M), "--save_steps", str(K)]
        args += case.variant_args
        run = self._run(name, *args, world=case.world)
        assert run.returncode == 0, run.tail()
        if fresh:
            self.original_hashes[name] = _hash_tree(run.out / f"checkpoint-{K}")
        return run

    def plain(self, stage: int) -> Run:
        """The plain baseline (fp32, one rank, nothing frozen) at ``stage``."""
        return self.baseline(Case(stage, 2 if stage == 3 else 3))

    def resumed(self, case: Case, *, patch: bool = True) -> Run:
        """``case.baseline``'s checkpoint-K resumed under ``case.stage`` in a new process."""
        base = self.baseline(case)
        name = f"{case.id}{'' if patch else '-nopatch'}"
        args = ["--stage", str(case.stage), "--max_steps", str(M), "--save_steps", str(K)]
        args += ["--resume_from_checkpoint", str(base.out / f"checkpoint-{K}")]
        # another init: every tensor the continuation uses must come from the checkpoint
        args += ["--init_seed", "1"]
        if case.offload:
            args.append("--offload_optimizer")
        args += case.variant_args
        if patch:
            args.append("--transplant")
        return self._run(name, *args, world=case.world)


_DIST_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Case:
    src: int
    stage: int
    offload: bool = False
    frozen: bool = False  # the embeddings are a frozen parameter (not in the optimizer)
    bf16: bool = False  # bf16 module and bf16_-prefixed optimizer shards, fp32 master
    ds_scheduler: bool = False  # DeepSpeed's WarmupDecayLR (state in the engine) owns the LR
    world: int = 1

    @property
    def variant(self) -> str:
        """What the baseline and the resumed run share (and what names the baseline)."""
        return "".join(
            (
                "-frozen" if self.frozen else "",
                "-bf16" if self.bf16 else "",
                "-dssched" if self.ds_scheduler else "",
                f"-{self.world}ranks" if self.world > 1 else "",
            )
        )

    @property
    def variant_args(self) -> list[str]:
        flags = {"--freeze_embeddings": self.frozen, "--bf16": self.bf16}
        flags["--ds_scheduler"] = self.ds_scheduler
        return [f for f, on in flags.items() if on]

    @property
    def id(self) -> str:
        off = "-offload" if self.offload else ""
        return f"z{self.src}-to-z{self.stage}{off}{self.variant}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("zero-transplant"))


TRANSPLANTS = [
    Case(2, 3),
    Case(3, 2),
    Case(2, 3, offload=True),
    Case(3, 2, frozen=True),  # ZeRO-3 saves frozen params partitioned: consolidated path
    Case(2, 3, world=2),  # partitions differ per rank; conversion on rank 0 only
    Case(2, 3, bf16=True, ds_scheduler=True),  # a typical GPU config
]
WITHOUT_PATCH = [Case(2, 3), Case(3, 2), Case(2, 3, offload=True)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", TRANSPLANTS, ids=lambda c: c.id)
def test_transplant_resume_matches_uninterrupted_run(runs: Runs, case: Case) -> None:
    base = runs.baseline(case)
    run = runs.resumed(case)
    assert run.returncode == 0, run.tail()
    # one clear line (rank 0 only), naming both stages
    lines = [ln for ln in run.log.splitlines() if TRANSPLANT_LINE in ln]
    assert len(lines) == 1, run.tail()
    assert f"ZeRO-{case.src} checkpoint" in lines[0]
    assert f"into this ZeRO-{case.stage} engine" in lines[0]
    assert f"optimizer step {K}," in lines[0]
    assert f"{1 if case.frozen else 0} frozen/buffers" in lines[0]

    # HF resumed at step K+1 and ran exactly the remaining steps
    assert sorted(run.losses, key=int) == [str(s) for s in range(K + 1, M + 1)]
    for step, micro in run.losses.items():
        ref = base.losses[step]
        assert len(micro) == len(ref) == 2
        for got, want in zip(micro, ref, strict=True):
            assert abs(got - want) <= LOSS_RTOL * abs(want), (step, got, want)

    assert run.weights.keys() == base.weights.keys()
    for name, w in base.weights.items():
        torch.testing.assert_close(run.weights[name], w, rtol=0, atol=WEIGHT_ATOL, msg=name)

    # DeepSpeed's step counters were transplanted: the next save is tagged global_step{M}
    assert (run.out / f"checkpoint-{M}" / "latest").read_text().strip() == f"global_step{M}"
    assert checkpoint_zero_stage(run.out / f"checkpoint-{M}") == case.stage


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", WITHOUT_PATCH, ids=lambda c: c.id)
def test_without_patch_the_resume_dies_with_the_bare_assertion(runs: Runs, case: Case) -> None:
    """Proves the test above can fail: HF's own resume crashes on every one of these moves."""
    run = runs.resumed(case, patch=False)
    assert run.returncode != 0
    assert "AssertionError" in run.log, run.tail()
    assert ORIGINAL_ERROR in run.log, run.tail()
    assert "state_dict_factory.py" in run.log
    assert "deepspeed_load_checkpoint" in run.log
    assert TRANSPLANT_LINE not in run.log
    assert not run.losses


@pytest.mark.timeout(600)
def test_original_checkpoint_files_are_never_modified(runs: Runs) -> None:
    for case in TRANSPLANTS:
        assert runs.resumed(case).returncode == 0
    for name, before in runs.original_hashes.items():
        ckpt = runs.cache[name].out / f"checkpoint-{K}"
        after = _hash_tree(ckpt)
        assert {k: after[k] for k in before if k in after} == before
        assert before.keys() <= after.keys()
        added = {Path(k).parts[0] for k in after.keys() - before.keys()}
        assert added <= {UNIVERSAL_SUBDIR, CONSOLIDATED_SUBDIR}, added
        assert UNIVERSAL_SUBDIR in added


@pytest.mark.timeout(600)
def test_conversion_is_done_once_and_reused(runs: Runs) -> None:
    assert runs.resumed(Case(2, 3)).returncode == 0
    marker = runs.plain(2).out / f"checkpoint-{K}" / UNIVERSAL_SUBDIR / "dsguard-universal.json"
    stamp = marker.stat().st_mtime_ns
    assert runs.resumed(Case(2, 3, offload=True)).returncode == 0
    assert marker.stat().st_mtime_ns == stamp
    doc = json.loads(marker.read_text())
    assert doc["tag"] == f"global_step{K}"


def _tiny_model(layers: int = 2, *, tie: bool = False) -> Any:
    from transformers import LlamaForCausalLM

    from tests.zero_trainer_script import tiny_llama_config

    cfg = tiny_llama_config(layers)
    cfg.tie_word_embeddings = tie
    torch.manual_seed(123)  # deliberately not the training init
    return LlamaForCausalLM(cfg)


def _assert_equal_to(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    own = dict(model.named_parameters())
    assert own.keys() == weights.keys()
    for name, w in weights.items():
        assert torch.equal(own[name].detach(), w), name


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stage", [2, 3])
def test_load_consolidated_weights_reproduces_the_trained_model(runs: Runs, stage: int) -> None:
    base = runs.plain(stage)
    ckpt = base.out / f"checkpoint-{M}"
    # ZeRO-2: HF gathered model.safetensors; ZeRO-3 saved without gathering: shards only.
    assert (ckpt / "model.safetensors").exists() == (stage == 2)
    model = _tiny_model()
    load_consolidated_weights(model, ckpt)
    _assert_equal_to(model, base.weights)
    if stage == 3:
        assert (ckpt / CONSOLIDATED_SUBDIR / "model.safetensors").is_file()
        again = _tiny_model()
        load_consolidated_weights(again, ckpt)  # from the cache
        _assert_equal_to(again, base.weights)


@pytest.mark.timeout(600)
def test_load_consolidated_weights_of_a_transplanted_run(runs: Runs) -> None:
    run = runs.resumed(Case(2, 3))
    assert run.returncode == 0, run.tail()
    model = _tiny_model()
    load_consolidated_weights(model, run.out / f"checkpoint-{M}")
    _assert_equal_to(model, run.weights)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stage", [2, 3])
def test_load_consolidated_weights_rejects_key_mismatch(runs: Runs, stage: int) -> None:
    ckpt = runs.plain(stage).out / f"checkpoint-{M}"
    deeper = _tiny_model(3)
    before = {k: v.clone() for k, v in deeper.state_dict().items()}
    with pytest.raises(WeightsMismatchError, match=r"Error\(s\) in loading state_dict") as exc:
        load_consolidated_weights(deeper, ckpt)
    assert "model.layers.2.self_attn.q_proj.weight" in exc.value.missing
    assert exc.value.unexpected == []
    assert all(torch.equal(before[k], v) for k, v in deeper.state_dict().items())  # untouched

    with pytest.raises(WeightsMismatchError) as exc:
        load_consolidated_weights(_tiny_model(1), ckpt)
    assert "model.layers.1.mlp.up_proj.weight" in exc.value.unexpected
    assert exc.value.missing == []


def test_load_consolidated_weights_tied_and_missing(tmp_path: Path) -> None:
    """HF saves a tied weight once; that is complete. A really missing key is not."""
    from safetensors.torch import save_file

    src = _tiny_model(tie=True)
    sd = {k: v.clone() for k, v in src.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, str(tmp_path / "model.safetensors"))
    dst = _tiny_model(tie=True)
    torch.nn.init.zeros_(dst.get_input_embeddings().weight)
    load_consolidated_weights(dst, tmp_path)
    assert torch.equal(dst.get_output_embeddings().weight, src.get_input_embeddings().weight)

    untied = _tiny_model(tie=False)
    with pytest.raises(WeightsMismatchError) as exc:
        load_consolidated_weights(untied, tmp_path)
    assert exc.value.missing == ["lm_head.weight"]

    with pytest.raises(FileNotFoundError, match="nothing to load weights from"):
        load_consolidated_weights(untied, tmp_path / "nowhere")


@pytest.mark.timeout(600)
def test_checkpoint_zero_stage(runs: Runs, tmp_path: Path) -> None:
    assert checkpoint_zero_stage(runs.plain(2).out / f"checkpoint-{K}") == 2
    assert checkpoint_zero_stage(runs.plain(3).out / f"checkpoint-{K}") == 3
    assert checkpoint_zero_stage(runs.plain(2).out) is None  # the output dir, not a ckpt
    assert checkpoint_zero_stage(tmp_path) is None
    (tmp_path / "latest").write_text("global_step9")
    assert checkpoint_zero_stage(tmp_path) is None  # names a dir that does not exist
    (tmp_path / "global_step9").mkdir()
    (tmp_path / "global_step9" / "mp_rank_00_model_states.pt").write_bytes(b"not a zip")
    (tmp_path / "global_step9" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").touch()
    assert checkpoint_zero_stage(tmp_path) == 2  # unreadable config: from the names


class _FakeEngine:
    def __init__(self, stage: int) -> None:
        self.stage = stage
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def zero_optimization_stage(self) -> int:
        return self.stage

    def load_checkpoint(self, path: str, **kw: Any) -> tuple[str, dict[str, Any]]:
        self.calls.append((path, kw))
        return path, {}


@pytest.fixture
def patched_hf() -> Any:
    """enable_zero_transplant in this process, undone afterwards."""
    hf_ds: Any = importlib.import_module("transformers.integrations.deepspeed")
    hf_trainer: Any = importlib.import_module("transformers.trainer")
    assert hf_trainer.deepspeed_load_checkpoint is hf_ds.deepspeed_load_checkpoint
    original = hf_ds.deepspeed_load_checkpoint
    enable_zero_transplant()
    enable_zero_transplant()  # idempotent
    yield original
    for mod in list(sys.modules.values()):
        namespace = getattr(mod, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(NAME) is ours():
            setattr(mod, NAME, original)


NAME = "deepspeed_load_checkpoint"


def ours() -> Any:
    return zero._dsguard_deepspeed_load_checkpoint


def test_enable_zero_transplant_patches_trainer_idempotently(patched_hf: Any) -> None:
    hf_ds: Any = importlib.import_module("transformers.integrations.deepspeed")
    hf_trainer: Any = importlib.import_module("transformers.trainer")

    ours = zero._dsguard_deepspeed_load_checkpoint
    assert hf_trainer.deepspeed_load_checkpoint is ours
    assert hf_ds.deepspeed_load_checkpoint is ours
    assert zero._original_load is patched_hf


@pytest.mark.timeout(600)
def test_same_stage_goes_to_the_original_unchanged(runs: Runs, patched_hf: Any) -> None:
    hf_trainer: Any = importlib.import_module("transformers.trainer")

    ckpt = runs.plain(2).out / f"checkpoint-{K}"
    engine = _FakeEngine(stage=1)  # ZeRO 1 and 2 share the file layout
    hf_trainer.deepspeed_load_checkpoint(engine, str(ckpt), load_module_strict=False)
    assert engine.calls == [
        (
            str(ckpt),
            {
                "load_module_strict": False,
                "load_optimizer_states": True,
                "load_lr_scheduler_states": True,
            },
        )
    ]
    # not a DeepSpeed checkpoint: HF's own error, untouched
    with pytest.raises(ValueError, match="Can't find a valid checkpoint"):
        hf_trainer.deepspeed_load_checkpoint(_FakeEngine(3), str(runs.root))
    # a stage the transplant cannot serve: a clear error instead of a bare AssertionError
    z3_ckpt = str(runs.plain(3).out / f"checkpoint-{K}")
    with pytest.raises(ZeroTransplantError, match="ZeRO-3 checkpoint into a ZeRO-0 engine"):
        hf_trainer.deepspeed_load_checkpoint(_FakeEngine(0), z3_ckpt)
