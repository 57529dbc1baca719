"""Issue 12, round 33: rules written from ``tune30`` (gathered as ``heldout31``), each from the
code that prints the message: Python's tempfile finding no writable directory, the Trainer's
FSDP option, newer JAX coordination barriers, oneCCL's error log lines (and libfabric's ENOMEM
under them, which is no host OOM), a traceback cut inside accelerate's FSDP wrap policy, and
a failure-signal handler naming the process that sent a SIGTERM. Each positive case fails on
the rules before round 33; the near misses and the guard pass before and after.
"""

from __future__ import annotations

import pytest

from dsguard.core.classify import FailureKind
from tests.test_classify_round7 import kind, read_as

K = FailureKind

_ACC = "/home/u/.local/lib/python3.10/site-packages/accelerate"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # CPython tempfile.py _get_default_tempdir
        (
            "FileNotFoundError: [Errno 2] No usable temporary directory found in ['/tmp', "
            "'/var/tmp', '/usr/tmp', '/home/user1/capreolus']",
            K.DISK_FULL,
        ),
        # transformers' ExplicitEnum under TrainingArguments' fsdp option
        (
            " ValueError: fsdp2 is not a valid FSDPOption, please select one of ['full_shard', "
            "'shard_grad_op', 'no_shard', 'hybrid_shard', 'offload', 'auto_wrap']",
            K.DS_CONFIG_ERROR,
        ),
        # TSL coordination_service.cc, the newer wording
        (
            "Original error: DEADLINE_EXCEEDED: Barrier timed out. Id: "
            "[Init]Wait_for_all_tasks_to_register::0. This usually happens because a task "
            "triggered the barrier too early or too slowly.",
            K.NCCL_ERROR,
        ),
        # oneCCL over libfabric: the provider's ENOMEM is the fabric's, not host RAM
        (
            "2025:05:23-19:04:20:(168955) |CCL_ERROR| atl_ofi.cpp:237 init: can't find "
            "suitable provider\n"
            "[hedp017:168955:0:168955] Caught signal 11 (Segmentation fault: address not "
            "mapped to object at address 0x8)\n"
            "2025:05:23-19:04:20:(168956) |CCL_ERROR| atl_ofi_helper.cpp:1204 "
            "atl_ofi_prov_init: fi_scalable_ep(prov->domain, info, &prov->sep, nullptr)\n"
            " fails with ret: -12, strerror: Cannot allocate memory",
            K.NCCL_ERROR,
        ),
        # a traceback cut on the raise inside accelerate's FSDP wrap policy
        (
            "Traceback (most recent call last):\n"
            f'  File "{_ACC}/accelerator.py", line 1461, in prepare_model\n'
            "    self.state.fsdp_plugin.set_auto_wrap_policy(model)\n"
            f'  File "{_ACC}/utils/dataclasses.py", line 1367, in set_auto_wrap_policy\n'
            '    raise Exception("Could not find the transformer layer class to wrap in the '
            'model.")',
            K.DS_CONFIG_ERROR,
        ),
        # glog's / Paddle's failure-signal handler naming the sender
        (
            "[SignalInfo: *** SIGTERM (@0x147) received by PID 108 (TID 0x7ff0553a4740) from "
            "PID 327 ***]",
            K.KILLED_EXTERNALLY,
        ),
        (
            "---------------------- Error Message Summary: ---------------------- FatalError: "
            "`Termination signal` is detected by the operating system.",
            K.KILLED_EXTERNALLY,
        ),
    ],
)
def test_round33_messages(text: str, expected: FailureKind) -> None:
    assert kind(text) is expected


@pytest.mark.parametrize(
    "text",
    [
        "OSError: [Errno 12] Cannot allocate memory",
        "RuntimeError: unable to mmap 1048576 bytes: Cannot allocate memory (12)",
    ],
)
def test_enomem_elsewhere_is_still_host_memory(text: str) -> None:
    assert kind(text) is K.HOST_OOM


@pytest.mark.parametrize(
    ("text", "not_expected"),
    [
        # oneCCL's warnings at a healthy start-up
        (
            "2023:11:28-16:35:45:(35980) |CCL_WARN| did not find MPI-launcher specific "
            "variables, switch to ATL/OFI",
            K.NCCL_ERROR,
        ),
        # a crash signal the process sent itself is no external stop
        (
            "[SignalInfo: *** SIGSEGV (@0x8) received by PID 108 (TID 0x7ff0553a4740) from "
            "PID 108 ***]",
            K.KILLED_EXTERNALLY,
        ),
        # another ExplicitEnum is the script's own value, not the distributed config
        (
            "ValueError: longest_first is not a valid PaddingStrategy, please select one of "
            "['longest', 'max_length', 'do_not_pad']",
            K.DS_CONFIG_ERROR,
        ),
    ],
)
def test_round33_near_misses(text: str, not_expected: FailureKind) -> None:
    assert read_as(text) is not not_expected
