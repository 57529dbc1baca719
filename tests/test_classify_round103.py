"""Issue 12, round 103: rules written from ``tune89`` (gathered as ``heldout90``), each from the
code that prints the message: the CUDA_CHECK macro DyNet and many CUDA codebases copy (the
failing call on one line, CUDA's error string on the same line or the next), tiny-cuda-nn's
allocation failure as a paste cut it a few letters short, neuralnet_pytorch's monitor giving up
on a non-finite loss, and a TensorFlow log line glued onto the BFC allocator's occupancy map by
a paste that lost the map's line end. Each positive case fails on the rules before round 103;
the near misses pass before and after.

Left as they read (each labelled by its helper, no label changed):

- 10 of the set's 11 ``ds_build_error`` logs are other packages' extensions, not DeepSpeed's op
  builds (mamba-ssm's selective scan 3, causal-conv1d 2, Megatron's fused kernels 2, xformers 1,
  bitsandbytes 2): the helper was asked to file them so, where this corpus's labelling rule
  reads a missing or broken extension of another package as the script's environment (a user
  error, as 7 of them read). The eleventh, hiyouga/LlamaFactory#9270, is DeepSpeed's own
  ``CUDA_HOME does not exist`` raised while trl imports it, but the excerpt ends in importlib's
  frames before that line.
- The 11 logs cut before the line that names the cause (the corpus README lists them).
- deepspeedai/DeepSpeed#4571: "CPU Virtual Memory: used = 26.4 GB, percent = 84.6%" then the
  launcher's "Killing subprocess 1080504", labelled a host OOM: the launcher kills the other
  ranks whenever one dies, whatever killed it, and 84.6 % in use is not memory that ran out.
- deepmodeling/Uni-Mol#17 (every fp16 parameter printed as nan, the excerpt cut before its
  FloatingPointError) and cheesama/DIET-pytorch#1 (a Lightning traceback cut inside
  ``detect_nan_tensors``' own frame header, before its ValueError): cut before the line.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_BFC_MAP = (
    "2020-04-29 02:49:43.473931: W tensorflow/core/common_runtime/bfc_allocator.cc:271] "
    + "*" * 22
    + "_"
    + "*" * 64
    + "_" * 13
    + " " * 27
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # clab/dynet#714: DyNet's CUDA_CHECK on a pool allocation, its two lines as pasted
        ("CUDA failure in cudaMalloc(&ptr, n)\nout of memory", K.CUDA_OOM),
        # the same macro behind rank prefixes
        ("[rank1]: CUDA failure in cudaMalloc(&p, sz)\n[rank1]: out of memory", K.CUDA_OOM),
        # the variant that prints both on one line
        ("CUDA failure in cudaMalloc(&buf, bytes): out of memory", K.CUDA_OOM),
        # NVlabs/instant-ngp#393: tiny-cuda-nn's allocation, the line cut by the paste
        (
            "13:54:28 ERROR    Uncaught exception: Could not allocate memory: C:\\Tools\\"
            "instant-ngp\\dependencies\\tiny-cuda-nn\\include\\tiny-cuda-nn/gpu_memory.h:112 "
            "cudaMalloc(&rawptr, n_bytes+DEBUG_GUARD_SIZE*2) failed with error out of memor",
            K.CUDA_OOM,
        ),
        # justanhduc/graphx-conv#14: neuralnet_pytorch's monitor on a non-finite loss
        (
            "    raise ValueError('NaN or Inf encountered. Training failed!')\n"
            "ValueError: NaN or Inf encountered. Training failed!",
            K.LOSS_DIVERGENCE,
        ),
        # deepchem/deepchem#1449: the OOM line glued onto the allocator's map
        (
            _BFC_MAP + "2020-04-29 02:49:43.473975: W tensorflow/core/framework/op_kernel.cc:"
            "1273] OP_REQUIRES failed at batch_matmul_op_impl.h:582 : Resource exhausted: OOM "
            "when allocating tensor with shape[57121,100,100] and type float on /job:localhost/"
            "replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            K.CUDA_OOM,
        ),
    ],
)
def test_round103_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # CUDA's error string not right after the macro's first line
        ("CUDA failure in cudaMalloc(&ptr, n)\nretrying with a smaller pool\nout of memory",
         K.CUDA_OOM),
        # a bare "out of memory" with no CUDA call before it
        ("loading shard 3\nout of memory", K.CUDA_OOM),
        # the macro's other errors are no OOM
        ("CUDA failure in cudaMemcpy(dst, src, n, kind)\ninvalid argument", K.CUDA_OOM),
        # tensorboardX's warning when a logged scalar is not finite: the run goes on
        ("NaN or Inf found in input tensor.", K.LOSS_DIVERGENCE),
        # a host tensor's OOM glued onto a map is still the host's
        (
            _BFC_MAP + "2020-04-29 02:49:43.473975: W tensorflow/core/framework/op_kernel.cc:"
            "1273] OP_REQUIRES failed at cwise_ops_common.cc:82 : Resource exhausted: OOM when "
            "allocating tensor with shape[1000,1000,100] and type float on /job:localhost/"
            "replica:0/task:0/device:CPU:0 by allocator cpu",
            K.CUDA_OOM,
        ),
    ],
)  # fmt: skip
def test_round103_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected


def test_a_map_alone_is_still_no_verdict() -> None:
    """The map on its own line names nothing (it is read by the OOM line that follows): a run
    that dies after it is a failure of no known kind."""
    assert read_as(_BFC_MAP) is K.UNKNOWN
