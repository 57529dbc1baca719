"""Issue 12, round 40: rules written from ``tune37`` (gathered as ``heldout38``), each from the
code that prints the message: Open MPI's own time limit on a job, c10d's resolver failing on
the master's name, and numba's driver wrapper reporting a failed CUDA call. Each positive
case fails on the rules before round 40; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_C10D = "/root/.local/lib/python3.7/site-packages/torch/distributed"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Open MPI / PRRTE's --timeout (MPIEXEC_TIMEOUT), also wrapped after "has been"
        (
            "--------------------------------------------------------------------------\n"
            "The user-provided time limit for job execution has been reached:\n\n"
            "  Timeout: 180 seconds\n\n"
            "The job will now be aborted.  Please check your code and/or\n"
            "adjust/remove the job execution time limit (as specified by --timeout\n"
            "command line option or MPIEXEC_TIMEOUT environment variable).",
            K.KILLED_EXTERNALLY,
        ),
        (
            "The user-provided time limit for job execution has been\nreached:\n\n"
            "  MPIEXEC_TIMEOUT: 8 seconds",
            K.KILLED_EXTERNALLY,
        ),
        # c10d's getaddrinfo under the env:// rendezvous
        (
            f'  File "{_C10D}/rendezvous.py", line 143, in _env_rendezvous_handler\n'
            "    store = TCPStore(master_addr, master_port, start_daemon)\n"
            "ValueError: host not found: Name or service not known",
            K.NCCL_ERROR,
        ),
        # numba's driver wrapper, with and without its exception name
        (
            "`Call to cuLaunchKernel results in CUDA_ERROR_INVALID_VALUE\n"
            "Error executing job with overrides: []",
            K.CUDA_FATAL,
        ),
        (
            "numba.cuda.cudadrv.driver.CudaAPIError: [700] Call to cuMemcpyDtoH results in "
            "UNKNOWN_CUDA_ERROR",
            K.CUDA_FATAL,
        ),
    ],
)
def test_round40_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # numba's failed allocation is a device OOM, not a fault
        (
            "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in "
            "CUDA_ERROR_OUT_OF_MEMORY",
            K.CUDA_FATAL,
        ),
        # a hub lookup's "not found" is not a rendezvous
        (
            "huggingface_hub.utils._errors.RepositoryNotFoundError: 404 Client Error. "
            "Repository Not Found for url: https://huggingface.co/api/models/x/y",
            K.NCCL_ERROR,
        ),
        # a scheduler's own time limit is read elsewhere; a script's words are not a launcher's
        ("INFO: the user-provided time limit is 3600 s, plenty for 2 epochs", K.KILLED_EXTERNALLY),
    ],
)
def test_round40_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
