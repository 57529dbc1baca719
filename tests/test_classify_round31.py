"""Issue 12, round 31: rules written from ``tune28`` (gathered as ``heldout29``), each from the
code that prints the message: Kaldi's own GPU allocator running out, a JIT op's link step
failing, JAX's coordination barrier and oneCCL's exceptions, Stable-Baselines3 reading a saved
model back, verl skipping a step on a non-finite grad norm, and NCCL's harmless warning that
there is no InfiniBand library. Each positive case fails on the rules before round 31; the
near misses pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import (
    ExitStatus,
    FailureKind,
    StreamClassifier,
    classify_saved,
    classify_text,
    diverged_lines,
)
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_SB3 = "/home/u/.local/lib/python3.8/site-packages/stable_baselines3/common"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Kaldi cudamatrix/cu-allocator.cc AllocateNewRegion, its runtime text quoted at the end
        (
            "ERROR (nnet3-chain-train[5.5]:AllocateNewRegion():cu-allocator.cc:519) Failed to "
            "allocate a memory region of 82837504 bytes.  Possibly this is due to sharing the "
            "GPU.  Try switching the GPUs to exclusive mode (nvidia-smi -c 3) and using the "
            "option --use-gpu=wait to scripts like steps/nnet3/chain/train.py.  Memory info: "
            "free:15M, used:11160M, total:11175M, free/total:0.0013 CUDA error: 'out of memory'",
            K.CUDA_OOM,
        ),
        # ninja's link edge of a JIT op (torch cpp_extension, DeepSpeed's cpu_adam)
        (
            "[1/1] c++ cpu_adam.o cpu_adam_impl.o -shared -lcurand -o cpu_adam.so\n"
            "FAILED: cpu_adam.so\n"
            "/usr/bin/ld: cannot find -lcurand\n"
            "collect2: error: ld returned 1 exit status",
            K.DS_BUILD_ERROR,
        ),
        # TSL coordination_service.cc, under jax.distributed.initialize
        (
            "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. "
            "Barrier_id: PjRT_Client_Connect. Timed out task names:",
            K.NCCL_ERROR,
        ),
        # oneCCL's exception through torch-ccl
        (
            "RuntimeError: oneCCL: exec.cpp:134 start_workers: EXCEPTION: failed to start "
            "worker # 0",
            K.NCCL_ERROR,
        ),
        # Stable-Baselines3 reading a saved model: a class the installed version lacks,
        # another Python's pickle, a zip without a key
        (
            f'  File "{_SB3}/base_class.py", line 600, in load\n'
            "    data, params, pytorch_variables = load_from_zip_file(path, device=device)\n"
            f'  File "{_SB3}/save_util.py", line 396, in load_from_zip_file\n'
            "    data = json_to_data(json_data)\n"
            f'  File "{_SB3}/save_util.py", line 165, in json_to_data\n'
            "    deserialized_object = cloudpickle.loads(base64_object)\n"
            "AttributeError: Can't get attribute 'TrainFreq' on <module "
            "'stable_baselines3.common.type_aliases'>",
            K.CHECKPOINT_ERROR,
        ),
        (
            f'  File "{_SB3}/save_util.py", line 164, in json_to_data\n'
            "    deserialized_object = cloudpickle.loads(base64_object)\n"
            "TypeError: an integer is required (got type bytes)",
            K.CHECKPOINT_ERROR,
        ),
        (
            f'  File "{_SB3}/base_class.py", line 636, in load\n'
            '    policy=data["policy_class"],\n'
            "KeyError: 'policy_class'",
            K.CHECKPOINT_ERROR,
        ),
        # verl's skipped updates, every step, and the run then dies: nothing else explains it
        (
            "(WorkerDict pid=9092) WARN: grad_norm is not finite: nan\n"
            "(WorkerDict pid=9209) WARN: rank 1 grad_norm is not finite: nan",
            K.LOSS_DIVERGENCE,
        ),
    ],
)
def test_round31_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


def test_an_absent_infiniband_library_is_not_a_communication_failure() -> None:
    """NCCL's "Failed to open libibverbs.so[.1]" WARN at a healthy start-up over sockets; the
    stall that followed (pytorch/pytorch#22531) is a hang."""
    text = (
        "host:10379:10379 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).\n"
        "host:10379:10379 [0] misc/ibvwrap.cu:63 NCCL WARN Failed to open libibverbs.so[.1]\n"
        "NCCL version 2.4.2+cuda10.0\n"
        "host:10379:10390 [0] NCCL INFO Ring 00 : 0 -> 1 [send] via NET/Socket/0\n"
    )
    assert read_as(text) is not K.NCCL_ERROR
    sc = StreamClassifier()
    sc.feed(text)
    sc.close()
    failure = classify_saved(sc.evidence, ExitStatus(raw=None, signal=None), hang=True)
    assert failure is not None and failure.kind is K.HANG


def test_weak_divergence_lines_never_stop_a_run() -> None:
    """A step skipped on a non-finite grad norm (verl), or a bare printed ``tensor(nan)``,
    printed by several workers is not two divergence lines: the run may go on healthy, so the
    live loop's rule (``diverged_lines``) does not stop it, and at exit 0 it succeeded."""
    text = (
        "(WorkerDict pid=1) WARN: grad_norm is not finite: nan\n"
        "(WorkerDict pid=2) WARN: grad_norm is not finite: nan\n"
        "tensor(nan, device='cuda:0')\n"
        "tensor(nan, device='cuda:1')\n"
        "{'loss': 0.71, 'grad_norm': 1.2, 'epoch': 0.5}\n"
    )
    sc = StreamClassifier()
    sc.feed(text)
    sc.close()
    assert sc.evidence and diverged_lines(sc.evidence) == []
    assert classify_text(text, exit_code=0) is None


def test_a_held_port_names_the_port() -> None:
    """The rendezvous port another process holds stays the job's error (the corpus since
    round 1, dsguard since round 5), now with a hint that names it."""
    failure = classify_text(
        "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500 "
        "(errno: 98 - Address already in use).\n",
        exit_code=1,
    )
    assert failure is not None and failure.kind is K.USER_CODE_ERROR
    assert failure.hint is not None and "port" in failure.hint


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # another runtime error quoted the same way is not an OOM
        ("CUDA error: 'an illegal memory access was encountered'", K.CUDA_OOM),
        # pytest's summary line has no colon after FAILED
        ("FAILED tests/test_ops.py::test_cpu_adam_so - AssertionError", K.DS_BUILD_ERROR),
        # a gRPC deadline of a data service is not the coordination barrier
        (
            "tensorflow.python.framework.errors_impl.DeadlineExceededError: DEADLINE_EXCEEDED: "
            "Deadline Exceeded (tf.data service)",
            K.NCCL_ERROR,
        ),
        # SB3's save side is not a load
        (
            f'  File "{_SB3}/save_util.py", line 310, in save_to_zip_file\n'
            "    archive.writestr('data', serialized_data)\n"
            "TypeError: a bytes-like object is required, not 'str'",
            K.CHECKPOINT_ERROR,
        ),
        # NCCL's socket failure in a WARN line is still one
        (
            "host:1:2 [0] misc/socket.cc:538 NCCL WARN Net : Connect to 10.0.0.2<43551> failed "
            ": Connection refused",
            K.USER_CODE_ERROR,
        ),
    ],
)
def test_round31_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
