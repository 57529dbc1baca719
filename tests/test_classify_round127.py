"""Issue 12, round 127: rules written from ``tune118`` and ``tune119`` (gathered as
``heldout119`` and ``heldout120``, scored once at 65/73 and 74/91), each from the code that
prints the message: TensorFlow 2's eager op failing its allocation on a named device, ND4J's
device and host allocations, Kaldi's GPU allocator in its other sentence, fairchem's NaN loss
warning, a split's squared-error or log-loss metric gone NaN, a device-side assert whose line
other writers interleaved, NCCL 2.0-2.3's bootstrap socket closed, torch's convolution input
check pasted bare, Caffe's LMDB data layer on a wrong path, Open MPI refusing a call before
MPI_Init, Lua Torch failing to open a file to write, and a shell's "Killed" inside a
reporter's quote marks. Each positive case fails on the rules before round 127; the near
misses pass before and after.

Left unread in the two sets: a TensorFlow 1.x OOM that names no device (the corpus's
deliberate gap: its CPU allocator raises the same words), a cluster wrapper's "returns: 137"
(one private tool's wording), NaN losses in a factorization machine's column table and in
abbreviated fields ("Ltr nan, Lge nan"), a model's predictions decoded as NaN, two NumPy archive
lookups that name a missing key (a Chainer snapshot's, but the same words come from any
``.npz`` data file), MXNet's parameter copy of a loaded model ("Incompatible attr in node"
is also a shape check of the network itself), and a traceback pasted indented as a whole.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # flwrlabs/flower#3159: TensorFlow 2's eager op, its device in the wrapped function
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
            "__wrapped__Mul_device_/job:localhost/replica:0/task:0/device:GPU:0}} failed to "
            "allocate memory [Op:Mul]",
            K.CUDA_OOM,
        ),
        # ... the same op placed on the host
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
            "__wrapped__AddV2_device_/job:localhost/replica:0/task:0/device:CPU:0}} failed to "
            "allocate memory [Op:AddV2]",
            K.HOST_OOM,
        ),
        # deeplearning4j/nd4j#2140: ND4J's device allocation failing after its warnings
        (
            "17:07:50.701 [main] WARN  o.n.j.handler.impl.CudaZeroHandler - Out of [DEVICE] "
            "memory, host memory will be used instead: deviceId: [0], requested bytes: "
            "[2957872]\n"
            'Exception in thread "ADSI prefetch thread" java.lang.RuntimeException: '
            "java.lang.RuntimeException: Failed to allocate 140713104 bytes from DEVICE [0] "
            "memory",
            K.CUDA_OOM,
        ),
        # deeplearning4j/deeplearning4j#4335: ND4J's host allocation
        (
            "16:38:26.787 [ParallelWrapper training thread 2] ERROR o.d.parallelism."
            "ParallelWrapper - Uncaught exception: java.lang.RuntimeException: java.lang."
            "RuntimeException: Can't allocate [HOST] memory: 998662; threadId: 37",
            K.HOST_OOM,
        ),
        # gooofy/zamia-speech#38: Kaldi's allocator when the GPU is not shared
        (
            "ERROR (nnet3-chain-train[5.5.95~1-4bdb]:AllocateNewRegion():cu-allocator.cc:513) "
            "Failed to allocate a memory region of 356515840 bytes.  Possibly smaller "
            "minibatch size would help.  Memory info: free:190M, used:3844M,",
            K.CUDA_OOM,
        ),
        # facebookresearch/fairchem#1568: the loss wrapper's warning at every step
        (
            "Train Epoch 0:   0%|          | 1/528 [00:15<2:15:46, 15.46s/it]\n"
            "WARNING:root:Found nans while computing loss\n"
            "WARNING:root:Found nans while computing loss",
            K.LOSS_DIVERGENCE,
        ),
        # coreylynch/pyFM#44: the training split's mean squared error
        ("-- Epoch 1\nTraining MSE: nan\n-- Epoch 2\nTraining MSE: nan", K.LOSS_DIVERGENCE),
        ("Validation MAE: nan", K.LOSS_DIVERGENCE),
        # axolotl-ai-cloud/axolotl#781: two processes' assert lines interleaved
        (
            ":1146: block: [17\n"
            ",0../aten/src/ATen/native/cuda/Indexing.cu,0:1146] Assertion `srcIndex < "
            "srcSelectDimSize: indexSelectLargeIndex` failed.",
            K.CUDA_FATAL,
        ),
        # horovod/horovod#666: NCCL 2.3's bootstrap, its socket closed by the other host
        (
            "seyun:17283:17549 [3] include/socket.h:371 WARN Connection closed by remote peer\n"
            "seyun:17283:17549 [3] INFO transport/net_socket.cu:166 -> 2",
            K.NCCL_ERROR,
        ),
        # braindecode/braindecode#186: torch's convolution check, quoted without its class
        (
            "Expected 4-dimensional input for 4-dimensional weight [16, 22, 1, 1], but got "
            "3-dimensional input of size [64, 22, 1125] instead",
            K.USER_CODE_ERROR,
        ),
        # BVLC/caffe#5182 and ddtm/caffe#2: the LMDB source path, in Caffe and a fork
        (
            "I0113 12:04:28.762876 31998 layer_factory.hpp:77] Creating layer data\n"
            "F0113 12:04:28.854418 32010 db_lmdb.hpp:15] Check failed: mdb_status == 0 "
            "(21 vs. 0) Is a directory\n*** Check failure stack trace: ***",
            K.USER_CODE_ERROR,
        ),
        (
            "> F0804 16:37:13.917794 21538 db.hpp:116] Check failed: mdb_status == 0 (2 vs. 0) "
            "No such file or directory",
            K.USER_CODE_ERROR,
        ),
        # exalearn/EXARL#22: Open MPI on a call made before MPI_Init
        (
            "*** The MPI_Comm_rank() function was called before MPI_INIT was invoked.\n"
            "*** This is disallowed by the MPI standard.\n"
            "*** Your MPI job will now abort.",
            K.USER_CODE_ERROR,
        ),
        # y0ast/VAE-Torch#10: torch.save into a directory that is not there
        (
            "Epoch: 2 Lowerbound: 122.62024767955 time: 73.759642124176\n"
            "/home/envy/torch/install/bin/luajit: cannot open <save/parameters.t7> in mode  w "
            "at /tmp/luarocks_torch-scm-1-8096/torch7/lib/TH/THDiskFile.c:640\n"
            "stack traceback:",
            K.USER_CODE_ERROR,
        ),
        # anishathalye/neural-style#61: the shell's word inside the reporter's quote marks
        ("'Optimization started...\nIteration    1/1000\nKilled'", K.HOST_OOM),
    ],
)
def test_round127_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # ND4J's warning that it falls back to host memory is not a failure
        ("WARN  o.n.j.handler.impl.CudaZeroHandler - Out of [DEVICE] memory, host memory will "
         "be used instead: deviceId: [0], requested bytes: [24000]", K.CUDA_OOM),
        # a finite metric, and an accuracy that is NaN (no loss)
        ("Training MSE: 0.01234", K.LOSS_DIVERGENCE),
        ("Training accuracy: nan", K.LOSS_DIVERGENCE),
        # glibc's host assert quotes with "'", and names a .c file
        ("train_gpt2cu: llmc/dataloader.h:186: dataloader_init: Assertion `x > 0' failed.",
         K.CUDA_FATAL),
        # an LMDB opened fine, and a map that filled up (not a path)
        ("I0602 18:39:42.838120 12188 db_lmdb.cpp:35] Opened lmdb examples/mnist/train_lmdb",
         K.USER_CODE_ERROR),
        # a file opened to read is a missing input, not the write this rule names
        ("luajit: cannot open <model.t7> in mode r  at /torch7/lib/TH/THDiskFile.c:640",
         K.USER_CODE_ERROR),
        # the word with a quote mark, and more of the sentence after it
        ("job state: Killed' (see scheduler log) for run 12", K.HOST_OOM),
    ],
)  # fmt: skip
def test_round127_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
