"""Issue 12: the structural layer of the classifier (core/frames.py).

A generic exception (ValueError, AssertionError, RuntimeError, ...) that no message rule
names is attributed by where it was raised: the innermost traceback frame outside
pass-through modules. Every traceback below is copied from a public issue thread (cited per
test); only the exception lines' kinds are asserted, so each test fails if the frame
attribution is removed or wrongly ordered.
"""

from __future__ import annotations

import dataclasses

from dsguard.core.classify import Failure, FailureKind, StreamClassifier, classify_text
from dsguard.core.frames import frame_kind, in_shared_memory, parse_frame

# EleutherAI/gpt-neox#1043: deepspeed.initialize's own assert about the config it was given.
# No message rule knows this wording; the raise site (deepspeed/__init__.py initialize) does.
GPT_NEOX_1043 = """\
Traceback (most recent call last):
  File "train.py", line 27, in <module>
    pretrain(neox_args=neox_args)
  File "/home/shaunst/repo/gpt-neox/megatron/training.py", line 183, in pretrain
    model, optimizer, lr_scheduler = setup_model_and_optimizer(
  File "/home/shaunst/repo/gpt-neox/megatron/training.py", line 605, in setup_model_and_optimizer
    model, optimizer, _, lr_scheduler = deepspeed.initialize(
  File "/home/shaunst/repo/gpt-neox/venv/lib/python3.8/site-packages/deepspeed/__init__.py", line 146, in initialize
    assert config is None, "Not sure how to proceed, we were given deepspeed configs in the deepspeed arguments and deepspeed.initialize() function call"
AssertionError: Not sure how to proceed, we were given deepspeed configs in the deepspeed arguments and deepspeed.initialize() function call
"""  # noqa: E501

# csuhan/ReDet#60: torch.load of a corrupt file (mmcv load_checkpoint -> torch/serialization.py
# _load raises a bare RuntimeError).
REDET_60 = """\
Traceback (most recent call last):
  File "tools/test.py", line 208, in <module>
    main()
  File "tools/test.py", line 168, in main
    checkpoint = load_checkpoint(model, args.checkpoint, map_location='cpu')
  File "/opt/Anaconda3/envs/redet/lib/python3.7/site-packages/mmcv/runner/checkpoint.py", line 172, in load_checkpoint
    checkpoint = torch.load(filename, map_location=map_location)
  File "/opt/Anaconda3/envs/redet/lib/python3.7/site-packages/torch/serialization.py", line 426, in load
    return _load(f, map_location, pickle_module, **pickle_load_args)
  File "/opt/Anaconda3/envs/redet/lib/python3.7/site-packages/torch/serialization.py", line 605, in _load
    raise RuntimeError("Invalid magic number; corrupt file?")
RuntimeError: Invalid magic number; corrupt file?
"""  # noqa: E501

# zeliu98/CloserLook3D#12: all_reduce before init_process_group. The raise site is c10d's
# argument check (_check_default_pg), the caller's mistake: it stays the script's error.
CLOSERLOOK3D_12 = """\
Traceback (most recent call last):
  File "CloserLook3D/pytorch/utils/util.py", line 49, in reduce_tensor
    dist.all_reduce(rt, op=dist.ReduceOp.SUM)
  File "/python3.6/site-packages/torch/distributed/distributed_c10d.py", line 903, in all_reduce
    _check_default_pg()
  File "/python3.6/site-packages/torch/distributed/distributed_c10d.py", line 192, in _check_default_pg
    "Default process group is not initialized"
AssertionError: Default process group is not initialized
"""  # noqa: E501

# LMCache/LMCache#1904 (review thread): an AttributeError raised inside c10d's all_reduce, under
# torch's c10d_logger wrapper, Python 3.12 caret lines included: a wrong object passed as the
# group, the script's bug, not a communication failure.
LMCACHE_1904 = """\
Traceback (most recent call last):
  File "/opt/dynamo/venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "/opt/dynamo/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 2924, in all_reduce
    work = group.allreduce([tensor], opts)
           ^^^^^^^^^^^^^^^
AttributeError: 'GroupCoordinator' object has no attribute 'allreduce'. Did you mean: 'all_reduce'?
"""  # noqa: E501

# sgl-project/sglang#3685: a broadcast that failed in the backend, under the c10d_logger wrapper
SGLANG_3685_FRAMES = [
    '  File "/usr/local/lib/python3.11/site-packages/sglang/srt/utils.py", line 693, in '
    "broadcast_pyobj",
    '  File "/usr/local/lib64/python3.11/site-packages/torch/distributed/c10d_logger.py", '
    "line 83, in wrapper",
    '  File "/usr/local/lib64/python3.11/site-packages/torch/distributed/distributed_c10d.py",'
    " line 2425, in broadcast",
]

# NVIDIA/Megatron-LM#878 (tests/data/corpus, tune2): a multiprocessing SemLock created in
# /dev/shm fails with ENOSPC; the frames say shared memory, the message says "disk".
MEGATRON_878 = """\
  File "/usr/lib/python3.10/multiprocessing/context.py", line 68, in Lock
    return Lock(ctx=self.get_context())
  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 162, in __init__
    SemLock.__init__(self, SEMAPHORE, 1, 1, ctx=ctx)
  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__
    sl = self._semlock = _multiprocessing.SemLock(
OSError: [Errno 28] No space left on device
"""

# huggingface/accelerate#2578 (tests/data/corpus, tune): pytest's "E" marker before a
# subprocess's frames.
PYTEST_E_FRAME = (
    'E             File "/home/ray/.local/lib/python3.9/site-packages/deepspeed/runtime/'
    'config.py", line 966, in _configure_train_batch_size'
)


def _kind(text: str) -> FailureKind:
    failure = classify_text(text, 1)
    assert failure is not None
    return failure.kind


def test_parse_frame_plain_rank_prefixed_pytest_and_rich() -> None:
    assert parse_frame(GPT_NEOX_1043.splitlines()[7]) == (
        "/home/shaunst/repo/gpt-neox/venv/lib/python3.8/site-packages/deepspeed/__init__.py",
        "initialize",
    )
    # the classifier peels "E" before this runs; the frame itself is indented
    assert parse_frame(PYTEST_E_FRAME[1:]) == (
        "/home/ray/.local/lib/python3.9/site-packages/deepspeed/runtime/config.py",
        "_configure_train_batch_size",
    )
    # rich's box (deepspeedai/DeepSpeed#3228) and a Windows path (innnky/so-vits-svc#46)
    assert parse_frame(
        "│ /data/alpaca-lora/finetune_accelerate.py:520 in <module>                            │"
    ) == ("/data/alpaca-lora/finetune_accelerate.py", "<module>")
    # rich wrapping " in _try_get_data" onto the next line (FoNDUE-HTR/Documentation#13,
    # tests/data/corpus, tune): the path alone
    wrapped = (
        "│ /home/users/g/gabays/kraken-env/lib/python3.8/site-packages/torch/utils/data/"
        "dataloader.py:1024  │"
    )
    assert parse_frame(wrapped) == (
        "/home/users/g/gabays/kraken-env/lib/python3.8/site-packages/torch/utils/data/"
        "dataloader.py",
        "",
    )
    win = '  File "D:\\Anaconda3\\lib\\site-packages\\torch\\serialization.py", line 650, in _save'
    assert parse_frame(win) == ("/D:/Anaconda3/lib/site-packages/torch/serialization.py", "_save")
    # echoed source and messages are not frames
    assert parse_frame('    assert config is None, "Not sure how to proceed"') is None
    assert parse_frame("AssertionError: Default process group is not initialized") is None


def test_generic_exception_raised_in_deepspeed_initialize_is_a_config_error() -> None:
    assert _kind(GPT_NEOX_1043) is FailureKind.DS_CONFIG_ERROR


def test_generic_exception_raised_in_torch_load_is_a_checkpoint_error() -> None:
    assert _kind(REDET_60) is FailureKind.CHECKPOINT_ERROR


def test_c10d_argument_checks_and_attribute_errors_stay_the_scripts_error() -> None:
    assert _kind(CLOSERLOOK3D_12) is FailureKind.USER_CODE_ERROR
    assert _kind(LMCACHE_1904) is FailureKind.USER_CODE_ERROR


def test_backend_failure_inside_a_collective_is_nccl() -> None:
    frames = [f for f in map(parse_frame, SGLANG_3685_FRAMES) if f is not None]
    assert len(frames) == 3
    assert frame_kind(frames, "RuntimeError") == "nccl_error"
    assert frame_kind(frames, "ValueError") is None  # argument errors are the caller's
    assert frame_kind(frames[:1], "RuntimeError") is None  # raised in sglang itself


def test_pass_through_frames_are_skipped_but_a_user_frame_is_not() -> None:
    pydantic = ("/x/site-packages/pydantic/main.py", "__init__")
    zero_cfg = ("/x/site-packages/deepspeed/runtime/config_utils.py", "__init__")
    user = ("/home/u/train.py", "main")
    assert frame_kind([zero_cfg, pydantic], "ValidationError") == "ds_config_error"
    assert frame_kind([zero_cfg, user], "ValueError") is None  # the user's code raised it


def test_enospc_in_shared_memory_is_host_oom_not_disk_full() -> None:
    assert _kind("Traceback (most recent call last):\n" + MEGATRON_878) is FailureKind.HOST_OOM
    frames = [f for f in map(parse_frame, MEGATRON_878.splitlines()) if f is not None]
    assert in_shared_memory(frames)
    # the same message after a torch.save frame is a full disk (the message rule alone)
    save = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/torch/serialization.py", line 423, in save\n'
        "    _save(obj, opened_zipfile, pickle_module, pickle_protocol)\n"
        "OSError: [Errno 28] No space left on device\n"
    )
    assert _kind(save) is FailureKind.DISK_FULL


def test_frames_are_per_rank_and_end_with_their_exception() -> None:
    """Rank-prefixed tracebacks interleave: each rank's exception is judged by its own
    frames; an exception line closes its traceback, so a later unrelated error is not
    attributed to the previous traceback's frames."""
    neox = GPT_NEOX_1043.splitlines()
    redet = REDET_60.splitlines()
    lines: list[str] = []
    for i in range(max(len(neox), len(redet))):
        lines += [f"[rank0]: {a}" for a in neox[i : i + 1]]
        lines += [f"[rank1]: {b}" for b in redet[i : i + 1]]
    lines.append("KeyError: 'labels'")  # unprefixed, no traceback of its own
    sc = StreamClassifier()
    sc.feed("\n".join(lines) + "\n")
    sc.close()
    kinds = {(ev.rank, ev.kind) for ev in sc.evidence}
    assert (0, FailureKind.DS_CONFIG_ERROR) in kinds
    assert (1, FailureKind.CHECKPOINT_ERROR) in kinds
    assert (None, FailureKind.USER_CODE_ERROR) in kinds


def test_pytest_e_marker_is_peeled() -> None:
    """accelerate#2578's excerpt style: a pytest-captured subprocess traceback; the exception
    line judged at its indentation after "E" (a real line from tests/data/corpus, tune)."""
    text = (
        "E           Traceback (most recent call last):\n"
        + PYTEST_E_FRAME
        + "\nE               self._batch_assertion()\n"
        + "E           KeyError: 'train_batch_size'\n"
    )
    assert _kind(text) is FailureKind.DS_CONFIG_ERROR


# vllm-project/vllm#7772: a traceback logged line by line under a logger prefix whose
# timestamp would change from line to line; the frames under it are the traceback's.
VLLM_7772 = """\
2024-08-22 13:50:25 ERROR 200507 [worker_base.py:148] Error executing method start_worker_execution_loop. This might cause deadlock in distributed execution.
2024-08-22 13:50:25 ERROR 200507 [worker_base.py:148] Traceback (most recent call last):
2024-08-22 13:50:25 ERROR 200507 [worker_base.py:148]   File "/opt/conda/lib/python3.8/site-packages/vllm/worker/worker_base.py", line 140, in execute_method
2024-08-22 13:50:25 ERROR 200507 [worker_base.py:148]     return executor(*args, **kwargs)
2024-08-22 13:50:25 ERROR 200507 [worker_base.py:148]   File "/opt/conda/lib/python3.8/site-packages/torch/utils/_contextlib.py", line 115, in decorate_context
2024-08-22 13:50:25 ERROR 200507 [worker_base.py:148]     return func(*args, **kwargs)
"""  # noqa: E501


def test_logger_prefixed_traceback_frames_are_read() -> None:
    sc = StreamClassifier()
    sc.feed(VLLM_7772)
    assert sc._frames[None] == [  # one traceback open, with these frames
        [
            ("/opt/conda/lib/python3.8/site-packages/vllm/worker/worker_base.py", "execute_method"),
            ("/opt/conda/lib/python3.8/site-packages/torch/utils/_contextlib.py",
             "decorate_context"),
        ]
    ]  # fmt: skip
    # the same prefix with another timestamp is peeled too; an exception line under it is
    # judged (here by the LMCache#1904 line: the script's error, raised in vLLM's code)
    later = VLLM_7772.splitlines()[2].replace("13:50:25", "13:50:26").split("  File")[0]
    evs = sc.feed(
        later + "AttributeError: 'GroupCoordinator' object has no attribute 'allreduce'\n"
    )
    assert [ev.kind for ev in evs] == [FailureKind.USER_CODE_ERROR]
    assert None not in sc._frames  # the exception line closed the traceback


def test_exception_repr_in_a_message_is_weak_user_code_evidence() -> None:
    """SeanNaren/deepspeech.pytorch#697 (tests/data/corpus, tune2): hydra's instantiate prints
    the caught exception's repr, with no exception line of its own."""
    line = (
        'I have just tried the trainer command and get the error:TypeError("Trainer.__init__() '
        "got an unexpected keyword argument 'num_processes'\")\n"
    )
    assert _kind(line + "full_key: trainer\n") is FailureKind.USER_CODE_ERROR
    sc = StreamClassifier()
    (ev,) = sc.feed(line)
    assert ev.weak and not ev.fatal  # any specific evidence outranks it
    # a host OOM's kill line in the same output still wins (exit 137 from a shell)
    failure = classify_text(line + "Killed\n", 137)
    assert failure is not None and failure.kind is FailureKind.HOST_OOM


# NVIDIA/earth2studio#217: an exception class whose name has no trigger in it, after Python
# 3.11 caret lines; raised in the standard library's zipfile, called from the user's loader.
EARTH2STUDIO_217 = """\
Traceback (most recent call last):
  File "/IdeaProjects/earth2studio/examples/11_corrfiff_local_gfs_inference.py", line 61, in <module>
    corrdiff = CorrDiffTaiwan.load_model(package)
               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/IdeaProjects/earth2studio/earth2studio/models/dx/corrdiff.py", line 221, in load_model
    with zipfile.ZipFile(checkpoint_zip, "r") as zip_ref:
         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/zipfile.py", line 1302, in __init__
    self._RealGetContents()
  File "/usr/lib/python3.11/zipfile.py", line 1369, in _RealGetContents
    raise BadZipFile("File is not a zip file")
zipfile.BadZipFile: File is not a zip file
"""  # noqa: E501

# brennanaba/ABlooper#2: Windows paths; torch.load's _load refuses a TorchScript archive.
ABLOOPER_2 = """\
Traceback (most recent call last):
  File "testABlooper.py", line 5, in <module>
    from ABlooper import CDR_Predictor
  File "C:\\Users\\18482\\work\\ABlooper-master\\ABlooper\\__init__.py", line 1, in <module>
    from ABlooper.ABlooper import CDR_Predictor
  File "C:\\Users\\18482\\work\\ABlooper-master\\ABlooper\\ABlooper.py", line 13, in <module>
    default_model.load_state_dict(torch.load(path, map_location=torch.device(device)))
  File "C:\\Users\\18482\\miniconda3\\lib\\site-packages\\torch\\serialization.py", line 386, in load
    return _load(f, map_location, pickle_module, **pickle_load_args)
  File "C:\\Users\\18482\\miniconda3\\lib\\site-packages\\torch\\serialization.py", line 559, in _load
    raise RuntimeError("{} is a zip archive (did you mean to use torch.jit.load()?)".format(f.name))
RuntimeError: C:\\Users\\18482\\work\\ABlooper-master\\ABlooper\\trained_model\\final_model is a zip archive (did you mean to use torch.jit.load()?)
"""  # noqa: E501


def _rules_only(failure: Failure | None) -> Failure | None:
    """The verdict without the probable kind: the lexicon's advisory guess from the words
    (core/lexicon.py) moves whenever its table is rebuilt; what these tests hold is that no
    rule and no frame names a kind."""
    if failure is None:
        return None
    return dataclasses.replace(failure, probable=None, probable_words=())


def test_exception_line_without_a_trigger_is_read_after_its_frames() -> None:
    sc = StreamClassifier()
    evs = sc.feed(EARTH2STUDIO_217)
    assert [(ev.kind, ev.text) for ev in evs] == [
        (FailureKind.USER_CODE_ERROR, "zipfile.BadZipFile: File is not a zip file")
    ]
    assert evs[0].line_no == 12
    # the same text cut before its exception line gives nothing (no guess from frames)
    assert _rules_only(classify_text(EARTH2STUDIO_217.rsplit("zipfile.BadZipFile", 1)[0], 1)) == (
        _rules_only(classify_text("", 1))
    )


def test_windows_torch_load_frames_name_a_checkpoint_error() -> None:
    assert _kind(ABLOOPER_2) is FailureKind.CHECKPOINT_ERROR


def _corpus(name: str) -> str:
    from pathlib import Path

    return (Path(__file__).parent / "data" / "corpus" / name).read_text(encoding="utf-8")


def test_cut_traceback_through_a_closed_function_names_its_kind() -> None:
    """huggingface/accelerate#2578 (tests/data/corpus, tune): the excerpt stops inside
    DeepSpeedConfig._configure_train_batch_size -> _batch_assertion, functions that only check
    the config's batch numbers: a config error although its exception line is cut off."""
    text = _corpus("failures/ds_config_error/pytest-E-prefixed-zero3-batch-assertion-2578.log")
    assert _kind(text) is FailureKind.DS_CONFIG_ERROR
    sc = StreamClassifier()
    assert not any(ev.kind is FailureKind.DS_CONFIG_ERROR for ev in sc.feed(text + "\n"))
    (ev,) = [ev for ev in sc.close() if ev.kind is FailureKind.DS_CONFIG_ERROR]
    assert not ev.fatal and "_configure_train_batch_size" in ev.text


def test_a_closed_function_does_not_outrank_the_exception_that_ended_its_traceback() -> None:
    """turboderp/exllama#225 (tests/data/corpus, tune): Ctrl-C while torch's extension builder
    waited on another build's lock; the traceback ends in KeyboardInterrupt, which decides."""
    text = _corpus("failures/hang/exllama-file-baton-wait-ctrl-c-225.log")
    failure = classify_text(text, 1)
    assert failure is not None and failure.kind is not FailureKind.DS_BUILD_ERROR


# pytorch/pytorch#39623: torch.load in a notebook, IPython 7's frame headers
PYTORCH_39623_FRAMES = [
    "~/.local/lib/python3.7/site-packages/torch/serialization.py in load(f, map_location, "
    "pickle_module, **pickle_load_args)",
    "~/.local/lib/python3.7/site-packages/torch/serialization.py in _load(zip_file, "
    "map_location, pickle_module, **pickle_load_args)",
    "~/.local/lib/python3.7/site-packages/torch/serialization.py in persistent_load(saved_id)",
]


def test_ipython_frames_are_frames() -> None:
    frames = [parse_frame(line) for line in PYTORCH_39623_FRAMES]
    assert [f[1] if f else None for f in frames] == ["load", "_load", "persistent_load"]
    assert frame_kind([f for f in frames if f], "RuntimeError") == "checkpoint_error"
    # IPython 8, aneeshbhattacharya/Automated-PnID-Symbol-Detection-and-Labelling#1
    ipy8 = (
        "File ~/miniconda3/envs/PnID/lib/python3.8/site-packages/torch/serialization.py:920, in "
        "_legacy_load(f, map_location, pickle_module, **pickle_load_args)"
    )
    assert parse_frame(ipy8) == (
        "/~/miniconda3/envs/PnID/lib/python3.8/site-packages/torch/serialization.py",
        "_legacy_load",
    )
    assert parse_frame("File saved to /tmp/out.py in 3s") is None


# yannvgn/laserembeddings#22: a notebook's torch.load of a truncated file, IPython 7 format
# (the frame header, numbered source lines, the exception at the margin)
LASEREMBEDDINGS_22 = """\
/opt/conda/lib/python3.6/site-packages/torch/serialization.py in _legacy_load(f, map_location, pickle_module, **pickle_load_args)
    700     unpickler = pickle_module.Unpickler(f, **pickle_load_args)
    701     unpickler.persistent_load = persistent_load
--> 702     result = unpickler.load()
    703 
    704     deserialized_storage_keys = pickle_module.load(f, **pickle_load_args)

UnpicklingError: pickle data was truncated
"""  # noqa: E501, W291


def test_ipython_traceback_through_torch_load_is_a_checkpoint_error() -> None:
    assert _kind(LASEREMBEDDINGS_22) is FailureKind.CHECKPOINT_ERROR


def test_frames_of_a_traceback_without_its_exception_line_are_not_lent_later() -> None:
    """ReDet#60's frames cut before their exception line, then training logs (a real HF Trainer
    line from ymcui/Chinese-LLaMA-Alpaca#534, tests/data/corpus, tune), then CloserLook3D#12's
    bare exception line: that error is the script's, not a checkpoint error."""
    cut = REDET_60.rsplit("RuntimeError:", 1)[0]
    logs = "{'loss': 2.0491, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28}\n" * 50
    late = "AssertionError: Default process group is not initialized\n"
    assert _kind(cut + logs + late) is FailureKind.USER_CODE_ERROR
    assert _kind(cut + late) is FailureKind.CHECKPOINT_ERROR  # right after: its own frames


def test_generated_frozen_and_stdlib_frames_pass_through() -> None:
    """Frames that only pass an exception on: "<string>" (dataclasses' generated __init__, an
    interpreter -c; pip's 'File "<string>", line 2, in <module>' in DeepSpeed#2902), importlib's
    trampolines (DeepSpeed PR #1879), functools' wrappers; accelerate's own
    utils/dataclasses.py (DeepSpeedPlugin.deepspeed_config_process) is a raise site, not
    Python's dataclasses.py (both tests/data/corpus, tune)."""
    string_init = parse_frame('  File "<string>", line 2, in <module>')
    frozen = parse_frame(
        '  File "<frozen importlib._bootstrap>", line 219, in _call_with_frames_removed'
    )
    functools = ("/usr/lib/python3.10/functools.py", "wrapper")
    ds_plugin = ("/x/site-packages/accelerate/utils/dataclasses.py", "deepspeed_config_process")
    assert string_init is not None and frozen is not None
    for through in (string_init, frozen, functools):
        assert frame_kind([ds_plugin, through], "ValueError") == "ds_config_error"
    assert frame_kind([ds_plugin], "ValueError") == "ds_config_error"


def test_a_lone_word_after_a_cut_traceback_is_not_an_exception() -> None:
    """earth2studio#217 cut before its exception line, then a reporter's one-word line: no
    exception is invented from it (a plain name counts only with ": message" after it)."""
    cut = EARTH2STUDIO_217.rsplit("zipfile.BadZipFile", 1)[0]
    assert _rules_only(classify_text(cut + "Thanks\n", 1)) == _rules_only(classify_text("", 1))
