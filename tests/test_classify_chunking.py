"""Issue 12: the verdict on a stream does not depend on how its reads fell.

The corpus is scored in 4 KiB pieces of a saved file, but a live child's output reaches the
pump a read at a time, and a line-buffered writer (Python's stderr on a pipe, since 3.9) ends
most reads at a line's end. Two readings looked a few lines past the line they were on, and
stopped short or ran ahead where a read ended:

* after a traceback's frame header, its source line and a trigger-less exception line
  (``_exception_after_frame``): a read ending at the header lost the source line, so a
  ``KeyError`` raised on ``optimizer.load_state_dict(ckpt["optimizer"])`` was the script's error
  a line at a time and a checkpoint's in one piece (six corpus logs); in one piece the reading
  ran ahead of an indented exception line that closes the traceback (pip's), and took a later
  ``WARNING: ...`` line for that traceback's exception;
* after a TensorFlow OOM line that names no device (``_tf_oom_device``): a second OOM line
  read while the first one's device lines were still to come replaced it.

Each case below fails on the classifier before this change. The corpus-wide check is in
tests/test_corpus_classify.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from dsguard.core.classify import (
    Evidence,
    FailureKind,
    StreamClassifier,
    classify_saved,
    decode_exit,
)
from dsguard.run.watch import OutputPump
from tests.test_classify import stream

K = FailureKind


def evidence(parts: list[str]) -> tuple[Evidence, ...]:
    """The evidence kept, after checking that feed and close reported exactly it and that
    every line was counted, whatever the parts."""
    kept, reported, lines = stream(parts)
    assert kept == tuple(reported)
    assert lines == "".join(parts).count("\n")
    return kept


def by_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def verdict(ev: tuple[Evidence, ...]) -> FailureKind | None:
    failure = classify_saved(ev, decode_exit(1))
    return None if failure is None else failure.kind


# sfa3d's resume (the corpus's checkpoint_error/sfa3d-resume-keyerror-optimizer.log)
RESUME = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 281, in <module>\n'
    "    main()\n"
    '  File "train.py", line 132, in main_worker\n'
    "    optimizer.load_state_dict(utils_state_dict['optimizer'])\n"
    "KeyError: 'optimizer'\n"
)


def test_a_resume_read_a_line_at_a_time_is_a_checkpoint_error() -> None:
    whole = evidence([RESUME])
    assert verdict(whole) is K.CHECKPOINT_ERROR
    assert evidence(by_lines(RESUME)) == whole
    assert evidence(list(RESUME)) == whole  # a character a read


def test_an_indented_exception_line_closes_its_traceback_in_one_piece_too() -> None:
    """pip's egg_info output, indented by four (the corpus's
    ds_build_error/h51a-other-ds-pip-aio-precompile-1250.log): the build's own exception
    line closes the traceback, so pip's WARNING at the margin after it is no exception of
    it, in one piece as a line at a time."""
    text = (
        "    Traceback (most recent call last):\n"
        '      File "<string>", line 1, in <module>\n'
        '      File "/src/deepspeed/setup.py", line 124, in <module>\n'
        '        assert False, f"Unable to pre-compile {op_name}, perhaps disable with '
        '{env_var}=0"\n'
        "    AssertionError: Unable to pre-compile async_io, perhaps disable with "
        "DS_BUILD_AIO=0\n"
        "    DS_BUILD_OPS=0\n"
        "WARNING: Discarding file:///src/deepspeed. Command errored out with exit status 1: "
        "python setup.py egg_info Check the logs for full command output.\n"
    )
    whole = evidence([text])
    assert [e.kind for e in whole] == [K.DS_BUILD_ERROR]
    assert evidence(by_lines(text)) == whole


def test_a_second_tensorflow_oom_line_keeps_the_first_ones_reading() -> None:
    """TensorFlow 1.x after a BFC allocator's map (gpt-2-simple, the corpus's
    cuda_oom/h13a-python-gpt2simple-tf-bfc-oom-189.log): one OOM line per failed op, each
    read as the GPU's by the map before it, whatever the reads."""
    text = (
        "2020-03-24 07:37:24.125560: W tensorflow/core/common_runtime/bfc_allocator.cc:424] "
        "******xx*************************x*******************************xxx*****\n"
        "2020-03-24 07:37:24.126084: W tensorflow/core/framework/op_kernel.cc:1628] "
        "OP_REQUIRES failed at constant_op.cc:77 : Resource exhausted: OOM when allocating "
        "tensor of shape [] and type float\n"
        "2020-03-24 07:37:24.126485: E tensorflow/core/common_runtime/executor.cc:642] "
        "Executor failed to create kernel. Resource exhausted: OOM when allocating tensor of "
        "shape [] and type float\n"
        "\t [[{{node model/h0/ln_1/add/y}}]]\n"
        "Traceback (most recent call last):\n"
    )
    whole = evidence([text])
    assert [(e.kind, e.line_no) for e in whole] == [(K.CUDA_OOM, 2), (K.CUDA_OOM, 3)]
    assert evidence(by_lines(text)) == whole


def test_a_tensorflow_oom_line_is_reported_when_its_device_line_is_read() -> None:
    """A TensorFlow OOM line that names no device is kept once a line after it names one; a
    line-buffered child's next lines come a read each, so another OOM line read on the way
    (TF's ``failed to allocate ... from device: CUDA_ERROR_OUT_OF_MEMORY``) is reported before
    it. What is kept, and which lines were reported, do not depend on the reads; the order of
    the reports is when each reading completed (round 113: a held-out log of this form read
    the same evidence both ways, its reports in another order)."""
    text = (
        "Epoch 1/10\n"
        "W tensorflow/core/framework/op_kernel.cc:993] Resource exhausted: OOM when allocating "
        "tensor with shape[64,256,56,56]\n"
        "I tensorflow/core/common_runtime/bfc_allocator.cc:680] Sum Total of in-use chunks: "
        "3.2GiB\n"
        "E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 3.80G "
        "(4082368512 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY\n"
        '\t [[Node: conv2/Conv2D = Conv2D[T=DT_FLOAT, _device="/job:localhost/replica:0/task:0'
        '/gpu:0"](pool1, conv2/kernel)]]\n'
    )
    whole_kept, whole_reported, whole_lines = stream([text])
    kept, reported, lines = stream(by_lines(text))
    assert (kept, lines) == (whole_kept, whole_lines)
    assert [(e.kind, e.line_no) for e in kept] == [(K.CUDA_OOM, 2), (K.CUDA_OOM, 4)]
    assert [e.line_no for e in whole_reported] == [2, 4]  # read ahead within one read
    assert [e.line_no for e in reported] == [4, 2]  # line 2 waits for line 5's device


# A real interpreter's traceback through a real pipe and the real pump, its stderr written a
# line at a time with a pause after each (as a rank's lines arrive while the pump keeps up).
_CHILD = textwrap.dedent(
    """
    import sys, time

    class Lines:
        def write(self, s):
            for part in s.splitlines(keepends=True):
                sys.__stderr__.write(part)
                sys.__stderr__.flush()
                time.sleep(0.05)
            return len(s)

        def flush(self):
            sys.__stderr__.flush()

    sys.stderr = Lines()
    ckpt = {"model": {}}

    class Optimizer:
        def load_state_dict(self, state):
            pass

    def resume(optimizer):
        optimizer.load_state_dict(ckpt["optimizer"])

    resume(Optimizer())
    """
)


def test_a_real_traceback_a_line_a_read_through_the_pump(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(_CHILD, encoding="utf-8")
    child = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE)
    assert child.stderr is not None
    sc = StreamClassifier()
    pump = OutputPump(child.stderr.fileno(), tmp_path / "out.log", sc,
                      on_fatal=lambda ev: None)  # fmt: skip
    pump.start()
    rc = child.wait(timeout=60)
    assert pump.join(30)  # the pump drained the pipe to its end
    child.stderr.close()
    assert pump.error is None
    out = (tmp_path / "out.log").read_text(encoding="utf-8")
    assert 'optimizer.load_state_dict(ckpt["optimizer"])' in out  # the real source line
    assert out.rstrip().endswith("KeyError: 'optimizer'")
    failure = classify_saved(sc.evidence, decode_exit(rc))
    assert failure is not None and failure.kind is K.CHECKPOINT_ERROR
