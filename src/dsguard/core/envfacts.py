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

from dsguard.core.records import as_builtins, from_builtins

__all__ = ["EnvFacts", "GpuFact", "Toolkit"]


# -- data -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Toolkit:
    """One CUDA toolkit directory found on this host."""

    path: str
    realpath: str
    #: ``major.minor`` ("12.1"), the part DeepSpeed compares with ``torch.version.cuda``.
    version: str | None = None
    #: The most precise version seen ("12.1.105"), for humans.
    full_version: str | None = None
    #: Where the version came from: "nvcc", "version.json", "version.txt" or "unknown".
    version_source: str = "unknown"
    #: ``bin/nvcc`` ran.
    has_nvcc: bool = False
    #: ``include/cuda_runtime.h`` (or ``targets/*/include/``) exists. A ``bin/nvcc`` wrapper
    #: script in ``/usr/local/bin`` makes torch pick ``CUDA_HOME=/usr/local``, which has none:
    #: such a directory is listed (it explains the failure) but never offered as CUDA_HOME.
    has_headers: bool = False
    #: How it was found: "CUDA_HOME", "CUDA_PATH", "PATH", "python-prefix", "search".
    found_via: str = "search"

    @property
    def usable(self) -> bool:
        """Can compile CUDA ops as ``CUDA_HOME``: a working nvcc and the runtime headers."""
        return self.has_nvcc and self.has_headers

    def as_dict(self) -> dict[str, Any]:
        return as_builtins(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Toolkit:
        return from_builtins(d, cls)


@dataclass(frozen=True, slots=True)
class GpuFact:
    """One GPU the job uses, as NVML reports it. ``capability`` None: the query failed."""

    index: int
    uuid: str | None = None
    name: str | None = None
    capability: tuple[int, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        return as_builtins(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuFact:
        return from_builtins(d, cls)


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
        return as_builtins(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EnvFacts:
        return from_builtins(d, cls)
