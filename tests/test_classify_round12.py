"""Issue 12, round 12: rules written from ``tune9`` (gathered as ``heldout10``), each from the
code that prints the message (PyCUDA's driver-API errors, TensorFlow's GPU BFC allocator giving
up, DeepSpeed's fused fp16 optimizer at its loss-scale floor). Each positive case fails on the
rules before round 12; the near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind, classify_text
from tests.test_classify import evidence_of
from tests.test_classify_round7 import kind

K = FailureKind

_PYCUDA = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 425, in <module>\n'
    "    cost=cost, callbacks=callbacks)\n"
    '  File "/srv/neon/neon/backends/nervanagpu.py", line 146, in __init__\n'
    "    self.gpudata = allocator(self.nbytes)\n"
    "pycuda._driver.MemoryError: {call} failed: out of memory\n"
)


@pytest.mark.parametrize("call", ["cuMemAlloc", "cuMemAllocPitch", "cuArrayCreate"])
def test_pycuda_memory_error_is_device_memory_at_line_time(call: str) -> None:
    """PyCUDA raises CUDA_ERROR_OUT_OF_MEMORY as ``pycuda._driver.MemoryError``: the GPU's
    memory, not the host's (round 11 took it for a host OOM, a rung that cannot help)."""
    text = _PYCUDA.format(call=call)
    assert kind(text) is K.CUDA_OOM
    oom = [ev for ev in evidence_of(text) if ev.kind is K.CUDA_OOM]
    assert oom and oom[0].fatal
    assert not [ev for ev in evidence_of(text) if ev.kind is K.HOST_OOM]


def test_pycuda_pinned_host_allocation_is_host_memory() -> None:
    """cuMemHostAlloc pins *host* pages: its failure is the host's memory."""
    assert kind(_PYCUDA.format(call="cuMemHostAlloc")) is K.HOST_OOM


def test_python_memory_error_stays_host_memory() -> None:
    assert kind("Traceback (most recent call last):\nMemoryError\n") is K.HOST_OOM
    assert kind("numpy.core._exceptions.MemoryError: Unable to allocate\n") is K.HOST_OOM


_BFC_DUMP = (
    "I tensorflow/core/common_runtime/bfc_allocator.cc:700] Sum Total of in-use chunks: 3.63GiB\n"
    "Limit:                  3894804480\n"
    "InUse:                  3894778368\n"
    "\n"
    "W tensorflow/core/common_runtime/bfc_allocator.cc:274] ******************xx***********\n"
)


def test_tensorflow_1_gpu_bfc_allocator_giving_up_is_a_cuda_oom() -> None:
    """TF 1.x's GPUBFCAllocator: "Ran out of memory trying to allocate ... See logs for memory
    state", then the op's OOM line that names no device (its placement line not pasted)."""
    text = (
        _BFC_DUMP + "W tensorflow/core/common_runtime/bfc_allocator.cc:275] Ran out of memory"
        " trying to allocate 193.0KiB.  See logs for memory state.\n"
        "W tensorflow/core/framework/op_kernel.cc:993] Resource exhausted: OOM when allocating"
        " tensor with shape[100,494]\n"
    )
    assert kind(text) is K.CUDA_OOM


def test_tensorflow_2_gpu_bfc_allocator_giving_up_is_a_cuda_oom() -> None:
    text = (
        "2021-03-02 10:11:12.345678: W tensorflow/core/common_runtime/bfc_allocator.cc:433]"
        " Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.2KiB (rounded to 1280)"
        "requested by op Adam/update\n"
    )
    assert kind(text) is K.CUDA_OOM


@pytest.mark.parametrize(
    "line",
    [
        # the retry TensorFlow goes on after (round 6): not a failure
        "2020-04-29 16:25:36.594950: W tensorflow/core/common_runtime/bfc_allocator.cc:243]"
        " Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.25GiB with"
        " freed_by_count=0. The caller indicates that this is not a failure, but may mean that"
        " there could be performance gains if more memory were available.",
        "W tensorflow/core/common_runtime/bfc_allocator.cc:217] Ran out of memory trying to"
        " allocate 2.59GiB. The caller indicates that this is not a failure, but may mean that"
        " there could be performance gains if more memory is available.",
        # a pinned-host BFC pool is not the GPU's
        "W bfc_allocator.cc:433] Allocator (gpu_host_bfc) ran out of memory trying to allocate"
        " 1.2KiB (rounded to 1280)requested by op X",
    ],
)
def test_a_bfc_retry_or_a_host_pool_is_not_a_cuda_oom(line: str) -> None:
    assert not [ev for ev in evidence_of(line + "\n") if ev.kind is K.CUDA_OOM]


_FUSED = (
    "[2021-01-26 22:07:01,872] [INFO] [fused_optimizer.py:314:_update_scale] \n"
    "Grad overflow on iteration 13\n"
    "[2021-01-26 22:07:01,872] [INFO] [fused_optimizer.py:316:_update_scale] Reducing dynamic"
    " loss scale from {old} to {new}\n"
)


@pytest.mark.parametrize(("old", "new"), [("1", "1"), ("1.0", "1"), ("128", "128.0")])
def test_fused_optimizer_at_its_scale_floor_is_a_divergence(old: str, new: str) -> None:
    """The new scale is max(scale / factor, min_loss_scale): equal to the old, the scale was
    already at its floor (1 by default, whatever the config set) and overflowed again."""
    text = _FUSED.format(old=old, new=new)
    assert kind(text) is K.LOSS_DIVERGENCE


@pytest.mark.parametrize(("old", "new"), [("65536", "32768"), ("2", "1"), ("1", "10"), ("12", "1")])
def test_fused_optimizer_still_reducing_is_not_a_divergence(old: str, new: str) -> None:
    """A start-up overflow that halves the scale is how dynamic scaling finds its range; a
    healthy run prints it and trains on (exit 0: no failure at all)."""
    text = _FUSED.format(old=old, new=new)
    assert not [ev for ev in evidence_of(text) if ev.kind is K.LOSS_DIVERGENCE]
    assert classify_text(text, exit_code=0) is None
