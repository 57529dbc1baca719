"""The training environment's facts as plain values: toolkits, GPUs, torch's CUDA.

The model lives in the core because the remedies (:mod:`dsguard.core.remedies`) decide on it;
how each fact is measured (a probe in the training interpreter, NVML, ``nvcc``) lives in
:mod:`dsguard.host.envfacts`, which fills these records.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EnvFacts", "GpuFact", "Toolkit"]


# -- data -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Toolkit:
    """One CUDA toolkit directory found on this host."""

    path: str
    realpath: str
    #: ``major.minor`` ("12.1"), the part DeepSpeed compares with ``torch.version.cuda``.
    version: str | None
    #: The most precise version seen ("12.1.105"), for humans.
    full_version: str | None
    #: Where the version came from: "nvcc", "version.json", "version.txt" or "unknown".
    version_source: str
    #: ``bin/nvcc`` ran.
    has_nvcc: bool
    #: ``include/cuda_runtime.h`` (or ``targets/*/include/``) exists. A ``bin/nvcc`` wrapper
    #: script in ``/usr/local/bin`` makes torch pick ``CUDA_HOME=/usr/local``, which has none:
    #: such a directory is listed (it explains the failure) but never offered as CUDA_HOME.
    has_headers: bool
    #: How it was found: "CUDA_HOME", "CUDA_PATH", "PATH", "python-prefix", "search".
    found_via: str

    @property
    def usable(self) -> bool:
        """Can compile CUDA ops as ``CUDA_HOME``: a working nvcc and the runtime headers."""
        return self.has_nvcc and self.has_headers

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "realpath": self.realpath,
            "version": self.version,
            "full_version": self.full_version,
            "version_source": self.version_source,
            "has_nvcc": self.has_nvcc,
            "has_headers": self.has_headers,
            "found_via": self.found_via,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Toolkit:
        return cls(
            path=str(d["path"]),
            realpath=str(d["realpath"]),
            version=_opt_str(d.get("version")),
            full_version=_opt_str(d.get("full_version")),
            version_source=str(d.get("version_source", "unknown")),
            has_nvcc=bool(d.get("has_nvcc", False)),
            has_headers=bool(d.get("has_headers", False)),
            found_via=str(d.get("found_via", "search")),
        )


@dataclass(frozen=True, slots=True)
class GpuFact:
    """One GPU the job uses, as NVML reports it. ``capability`` None: the query failed."""

    index: int
    uuid: str | None
    name: str | None
    capability: tuple[int, int] | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "capability": None if self.capability is None else list(self.capability),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuFact:
        cap = d.get("capability")
        return cls(
            index=int(d["index"]),
            uuid=_opt_str(d.get("uuid")),
            name=_opt_str(d.get("name")),
            capability=None if cap is None else (int(cap[0]), int(cap[1])),
        )


@dataclass(frozen=True, slots=True)
class EnvFacts:
    """Facts about the training environment; every field may be unknown (None) with a reason."""

    python: str = ""
    torch_version: str | None = None
    #: ``torch.version.cuda`` ("12.1"); None for a CPU or ROCm build of torch, or unknown.
    torch_cuda: str | None = None
    torch_hip: str | None = None
    #: Why the torch fields are None when the probe failed (None: the probe answered).
    torch_error: str | None = None
    #: ``torch.utils.cpp_extension.CUDA_HOME`` in the attempt's environment: the toolkit the
    #: JIT build uses now. None: none found, or unknown (see ``torch_error``).
    cuda_home: str | None = None
    #: The torch-extensions build root (``TORCH_EXTENSIONS_DIR`` or ``~/.cache/...``).
    torch_extensions_dir: str | None = None
    deepspeed_version: str | None = None
    toolkits: tuple[Toolkit, ...] = ()
    #: The GPUs the job uses. None: unknown (see ``gpu_error``); () : NVML sees no GPU.
    gpus: tuple[GpuFact, ...] | None = None
    gpu_error: str | None = None
    #: ``DS_SKIP_CUDA_CHECK=1`` is already set for the attempt.
    ds_skip_cuda_check: bool = False
    notes: tuple[str, ...] = field(default=())

    def toolkit_at(self, path: str | None) -> Toolkit | None:
        """The detected toolkit at ``path`` (compared by real path), if any."""
        if not path:
            return None
        real = os.path.realpath(path)
        return next((t for t in self.toolkits if t.realpath == real), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "torch_version": self.torch_version,
            "torch_cuda": self.torch_cuda,
            "torch_hip": self.torch_hip,
            "torch_error": self.torch_error,
            "cuda_home": self.cuda_home,
            "torch_extensions_dir": self.torch_extensions_dir,
            "deepspeed_version": self.deepspeed_version,
            "toolkits": [t.as_dict() for t in self.toolkits],
            "gpus": None if self.gpus is None else [g.as_dict() for g in self.gpus],
            "gpu_error": self.gpu_error,
            "ds_skip_cuda_check": self.ds_skip_cuda_check,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EnvFacts:
        gpus = d.get("gpus")
        return cls(
            python=str(d.get("python", "")),
            torch_version=_opt_str(d.get("torch_version")),
            torch_cuda=_opt_str(d.get("torch_cuda")),
            torch_hip=_opt_str(d.get("torch_hip")),
            torch_error=_opt_str(d.get("torch_error")),
            cuda_home=_opt_str(d.get("cuda_home")),
            torch_extensions_dir=_opt_str(d.get("torch_extensions_dir")),
            deepspeed_version=_opt_str(d.get("deepspeed_version")),
            toolkits=tuple(Toolkit.from_dict(t) for t in d.get("toolkits") or ()),
            gpus=None if gpus is None else tuple(GpuFact.from_dict(g) for g in gpus),
            gpu_error=_opt_str(d.get("gpu_error")),
            ds_skip_cuda_check=bool(d.get("ds_skip_cuda_check", False)),
            notes=tuple(str(n) for n in d.get("notes") or ()),
        )


def _opt_str(v: object) -> str | None:
    return None if v is None else str(v)
