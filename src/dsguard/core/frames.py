"""Traceback structure for the classifier: which frames name a failure's kind.

A training failure's last exception line often carries a generic class (``ValueError``,
``AssertionError``, ``RuntimeError``) whose message no rule knows; where in the stack it was
raised does name the kind. This module holds those facts, pure and stdlib-only, so that
``classify`` can stay a message matcher with one structural hook.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "BUILD_FRAME",
    "closed_frame_kind",
    "frame_header",
    "frame_kind",
    "in_shared_memory",
    "parse_frame",
    "source_kind",
]

# A traceback frame inside DeepSpeed's op builder or torch's C++/CUDA extension builder, in
# Python's ('File ".../op_builder/builder.py", line 9') or IPython's (".../cpp_extension.py in
# _run_ninja_build(...)") format.
# (Linear on a 1 MB line: each branch starts at one literal, and no two unbounded runs meet.)
BUILD_FRAME = re.compile(
    r"File \"[^\"\n]*(?:op_builder|torch/utils/cpp_extension\.py)[^\"\n]*\", line "
    r"|^\S*(?:op_builder/\S*|torch/utils/cpp_extension\.py) in \w"
)

# A Python traceback frame header, plain ('  File "/x/config.py", line 966, in _batch_assertion'),
# rank-prefixed (the prefix is peeled before this runs) or inside a pytest failure ("E     File
# ..."), and rich's box form ("│ /x/dataloader.py:1024 in _try_get_data │"). Paths are kept
# as printed; Windows separators are normalised before the table below is consulted.
_PLAIN = re.compile(r"\s*File \"([^\"\n]+)\", line \d+, in ([^\s,]+)")
# (issue 12, round 6) The same header as pastes damage it: selected without its leading
# 'File ' ('"python3.10/site-packages/deepspeed/runtime/state_dict_factory.py", line 168, in
# check_ckpt_list'), or wrapped by a terminal or an issue form inside "line N, in f" ('File
# ".../c10d_rendezvous_backend.py", line 11' + '9, in _call_store'). Only a .py path, and only
# up to the line's end: the function is kept if it is whole on the line, else left empty, which
# only path-wide rows match. (Round 34, tune31: also a paste whose first line the excerpt cut
# inside the path, 'EasyR1/verl/utils/fsdp_utils.py", line 66, in get_fsdp_wrap_policy',
# hiyouga/EasyR1#15: without its opening quote the path has no blank, so prose is not read.)
_PLAIN_CUT = re.compile(
    r"\s*(?:File )?\"?((?:(?<=\")[^\"\n]+|[^\s\"]+)\.pyw?)\", line"
    r"(?: \d*(?:,(?: i(?:n(?: ([^\s,]*))?)?)?)?)?\s*$"
)
# (rich wraps " in <func>" onto the next line when the path is long: the path alone is kept,
# with no function, which only path-wide rows of the table below can match)
_RICH = re.compile(r"\s*│\s*(\S+\.pyw?):\d+(?: in ([\w<>.]+))?")
# IPython 8 ("File ~/lib/python3.10/site-packages/torch/serialization.py:789, in load(f, ...)")
# and IPython 7 ("~/.local/lib/python3.7/site-packages/torch/serialization.py in load(f, ...)"),
# as Jupyter and Colab print them. (Round 60, tune57: Colab's IPython 7 frame as its page
# copies it, the path a Markdown link: "[/usr/local/lib/python3.8/dist-packages/
# pytorch_lightning/utilities/migration/migration.py](https://localhost:8080/#) in
# _migrate_loop_global_step_to_progress_tracking(checkpoint)", sweetcocoa/pop2piano#15.)
_IPYTHON = re.compile(
    r"\s*(?:File ([~/]\S*?\.pyw?|[A-Za-z]:\\\S*?\.pyw?):\d+, in "
    r"|\[?([~/]\S*?\.pyw?)(?:\]\(\S*?\))? in )([\w<>.]+)\("
)

_SLASHES = re.compile(r"/{2,}")  # a doubled "\\\\" (JSON-escaped error files print paths so)

# Frames that only pass an exception through (a validator library raising on behalf of its
# model, a decorator, an import machinery trampoline, dataclasses' generated __init__ in
# "<string>"): the raise site that names the kind is the first frame outside them.
# Standard-library modules only under the interpreter's own lib directory: accelerate has a
# utils/dataclasses.py of its own, which is a raise site.
_PASS_THROUGH = re.compile(
    r"^/<|/(?:pydantic|pydantic_core)/|/typing_extensions\.py$"
    r"|/(?:python3\.\d+|Lib)/(?:json/|importlib/"
    r"|(?:functools|contextlib|typing|abc|enum|dataclasses|copy)\.py$)"
    r"|/torch/distributed/c10d_logger\.py$|/torch/utils/_contextlib\.py$"
    # (round 66) MXNet's check_call, through which every C API call raises its MXNetError:
    # the Python function that made the call names the kind
    r"|/mxnet/base\.py$"
)

# Exception classes (last dotted component) a frame may re-name, per kind. Only generic classes:
# a class that names its cause (OutOfMemoryError, KeyboardInterrupt) has a message rule, and
# ImportError/ModuleNotFoundError are environment errors whichever library raised them.
_CONFIG_EXC = frozenset(
    {"ValueError", "AssertionError", "TypeError", "KeyError", "RuntimeError", "Exception",
     "NotImplementedError", "ValidationError", "DeepSpeedConfigError", "JSONDecodeError"}
)  # fmt: skip
_CHECKPOINT_EXC = frozenset(
    {"RuntimeError", "ValueError", "KeyError", "AssertionError", "Exception", "EOFError",
     "UnpicklingError", "OSError", "FileNotFoundError", "IsADirectoryError", "SafetensorError",
     "ZeRORuntimeException", "BadZipFile", "NotImplementedError"}
)  # fmt: skip
#: Megatron's checkpoint module (megatron/training/checkpointing.py; megatron/checkpointing.py
#: before core 0.6 and in Megatron-DeepSpeed) and its loading functions
_MEGATRON_CHECKPOINTING = re.compile(r"/megatron/(?:training/)?checkpointing\.py$")
_MEGATRON_LOAD = re.compile(
    r"load_checkpoint|_load_base_checkpoint|_load_global_dist_base_checkpoint"
    r"|_load_non_persistent_base_checkpoint|load_args_from_checkpoint|read_metadata"
    r"|find_checkpoint_rank_0|load_biencoder_checkpoint|fix_query_key_value_ordering"
)
_NCCL_EXC = frozenset(
    {"RuntimeError", "DistError", "DistBackendError", "DistNetworkError", "DistStoreError",
     "TimeoutError", "ConnectionError", "ConnectionResetError", "ConnectionRefusedError"}
)  # fmt: skip

# (kind, path pattern, function pattern or None for any, exception classes). The first frame
# outside _PASS_THROUGH, counted from the innermost, is looked up; a user's file or any other
# library gives no kind (the caller keeps user_code_error). Function names were checked in
# deepspeed 0.19.8, transformers 5.23, accelerate 1.15, torch 2.13, peft 0.21, safetensors 0.8
# (older releases by the same names: transformers < 4.35 kept it all in transformers/deepspeed.py).
_FRAME_TABLE: tuple[tuple[str, re.Pattern[str], re.Pattern[str] | None, frozenset[str]], ...] = (
    # DeepSpeed's config classes: runtime/config.py DeepSpeedConfig (_batch_assertion,
    # _configure_train_batch_size, _do_error_check, get_* readers), config_utils.py
    # DeepSpeedConfigModel, zero/config.py, zero/offload_config.py, and the other *config.py
    # models (activation checkpointing, monitor, comm, aio, compression, inference)
    ("ds_config_error", re.compile(r"/deepspeed/(?:\w+/)*\w*config\w*\.py$"), None, _CONFIG_EXC),
    # deepspeed.initialize's own asserts are about the config it was given ("Not sure how to
    # proceed, we were given deepspeed configs in the deepspeed arguments and
    # deepspeed.initialize() function call", "DeepSpeed requires --deepspeed_config ...");
    # runtime/torch_autocast.py checks torch.autocast against the config
    (
        "ds_config_error",
        re.compile(r"/deepspeed/__init__\.py$"),
        re.compile(r"initialize"),
        frozenset({"AssertionError"}),
    ),
    # (round 27) accelerate's launcher reading its own config file (commands/config/
    # config_args.py: unknown keys, no distributed_type; accelerate 1.15), and DeepSpeed's
    # parallel groups, whose asserts check the parallel sizes against the world size
    # ("AssertionError: 12 is not divisible by 8" from _ensure_divisibility when ep_size does
    # not divide it; utils/groups.py, deepspeed 0.19.8)
    (
        "ds_config_error",
        re.compile(r"/accelerate/commands/config/config_args\.py$"),
        re.compile(r"load_config_from_file|from_yaml_file|from_json_file|process_config"),
        _CONFIG_EXC,
    ),
    (
        "ds_config_error",
        re.compile(r"/deepspeed/utils/groups\.py$"),
        re.compile(r"_ensure_divisibility|_create_\w+"),
        frozenset({"AssertionError"}),
    ),
    (
        "ds_config_error",
        re.compile(r"/deepspeed/runtime/torch_autocast\.py$"),
        None,
        frozenset({"AssertionError", "ValueError"}),
    ),
    # DeepSpeedEngine's own configuration checks before any step runs
    (
        "ds_config_error",
        re.compile(r"/deepspeed/runtime/engine\.py$"),
        re.compile(
            r"_do_args_sanity_check|_do_sanity_check|_do_optimizer_sanity_check"
            r"|_configure_(?:optimizer|basic_optimizer|zero_optimizer|fp16_optimizer"
            r"|bf16_optimizer|lr_scheduler|with_arguments|checkpointing)|_scheduler_from_config"
        ),
        _CONFIG_EXC,
    ),
    # transformers integrations/deepspeed.py (deepspeed.py before 4.35): HfDeepSpeedConfig,
    # HfTrainerDeepSpeedConfig's auto-value filling and mismatch check, deepspeed_init
    (
        "ds_config_error",
        re.compile(r"/transformers/(?:integrations/)?deepspeed\.py$"),
        re.compile(
            r"__init__|fill_match|fill_only|is_auto|trainer_config_process"
            r"|trainer_config_finalize|deepspeed_config|deepspeed_optim_sched|deepspeed_init"
            r"|set_hf_deepspeed_config|propagate_args_to_deepspeed"
        ),
        _CONFIG_EXC,
    ),
    # accelerate: Accelerator._prepare_deepspeed, DeepSpeedPlugin's config processing
    # (utils/dataclasses.py; not __post_init__, which every plugin class there has), and
    # utils/deepspeed.py HfDeepSpeedConfig
    (
        "ds_config_error",
        re.compile(r"/accelerate/accelerator\.py$"),
        re.compile(r"_prepare_deepspeed"),
        _CONFIG_EXC,
    ),
    (
        "ds_config_error",
        re.compile(r"/accelerate/utils/dataclasses\.py$"),
        # (round 32, tune29: and the FSDP plugin's wrap policy read from the config and
        # FSDP_* environment, "ValueError: invalid literal for int() with base 10:
        # '100000000.0'" for min_num_params; huggingface/accelerate#1361)
        re.compile(
            r"deepspeed_config_process|_deepspeed_config_checks|fill_match|set_auto_wrap_policy"
        ),
        _CONFIG_EXC,
    ),
    (
        "ds_config_error",
        re.compile(r"/accelerate/utils/deepspeed\.py$"),
        re.compile(
            r"__init__|set_stage_and_offload|find_config_node|get_value"
            r"|del_config_sub_tree"
        ),
        _CONFIG_EXC,
    ),
    # Loading a checkpoint: torch.load (not torch.save, whose failures are a full disk or a
    # missing directory; not _open_file/__init__, shared by both), nn.Module.load_state_dict,
    # safetensors' loaders, DeepSpeed's engine and optimizer loaders and its checkpoint/
    # package, transformers' state-dict loaders and Trainer resume, accelerate load_state,
    # peft adapter loading
    (
        "checkpoint_error",
        re.compile(r"/torch/serialization\.py$"),
        re.compile(
            r"load|_load|_legacy_load|legacy_load|persistent_load|load_tensor|_check_seekable"
            r"|_is_zipfile|restore_location|default_restore_location|_cuda_deserialize"
            r"|validate_cuda_device|_validate_device|_deserialize|find_class"
            r"|_get_restore_location|_check_dill_version"
        ),
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        re.compile(r"/torch/nn/modules/module\.py$"),
        re.compile(r"load_state_dict|_load_from_state_dict"),
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        re.compile(r"/safetensors/torch\.py$"),
        re.compile(r"load_file|load|load_model"),
        _CHECKPOINT_EXC,
    ),
    # (issue 12, round 118, tune104) fvcore's Checkpointer and detectron2's
    # DetectionCheckpointer, which only find and read the weights a config names: _load_file
    # reads a ".pkl" with plain pickle, so a torch.save file there raises UnpicklingError
    # ("A load persistent id instruction ...", cut in the paste; facebookresearch/detectron2
    # #2881, MoCo's converted weights named .pkl)
    (
        "checkpoint_error",
        re.compile(r"/fvcore/common/checkpoint\.py$|/detectron2/checkpoint/\w+\.py$"),
        re.compile(r"load|_load_file|_load_model|resume_or_load|_convert_ndarray_to_tensor"),
        _CHECKPOINT_EXC,
    ),
    # (issue 12, round 124, tune114) StyleGAN2-ADA's legacy.py, which StyleGAN3, EG3D and
    # their forks keep: load_network_pkl unpickles a network snapshot (to resume training or to
    # start from one), through a custom Unpickler's find_class in some forks; a snapshot
    # pickled under another torch names a class this one lacks ("AttributeError: Can't get
    # attribute '_LinearWithBias' on <module 'torch.nn.modules.linear'", resuming from
    # network-snapshot-000300.pkl; nupurkmr9/vision-aided-gan#7)
    (
        "checkpoint_error",
        re.compile(r"/legacy\.py$"),
        re.compile(r"load_network_pkl|find_class"),
        _CHECKPOINT_EXC | {"AttributeError", "ModuleNotFoundError"},
    ),
    (
        "checkpoint_error",
        re.compile(r"/deepspeed/runtime/engine\.py$"),
        re.compile(
            r"load_checkpoint|_load_checkpoint|_load_zero_checkpoint|load_universal_checkpoint"
            r"|_get_all_zero_checkpoints|_get_all_zero_checkpoint_state_dicts"
            r"|load_module_state_dict|load_moe_state_dict|_get_all_zero_checkpoint_names"
        ),
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        re.compile(
            r"/deepspeed/runtime/(?:zero/stage3|zero/stage_1_and_2|bf16_optimizer"
            r"|fp16/\w+)\.py$"
        ),
        re.compile(
            r"load_state_dict|_load_legacy_checkpoint|_load_universal_checkpoint"
            r"|_load_global_state\w*|_rigid_load_state_dict|load_hp_checkpoint_state\w*"
            r"|load_module_checkpoint_state\w*|_restore_from_bit16_weights"
            r"|_restore_from_elastic_fp32_weights"
        ),
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        # (round 29: and the copy of zero_to_fp32.py DeepSpeed saves in each checkpoint
        # directory, run from there, deepspeedai/DeepSpeed#1317)
        re.compile(r"/deepspeed/checkpoint/\w+\.py$|/zero_to_fp32\.py$"),
        None,
        _CHECKPOINT_EXC,
    ),
    # (issue 12, round 10) Megatron-LM's checkpoint loader (megatron/training/checkpointing.py,
    # megatron/checkpointing.py before core 0.6; Megatron-DeepSpeed keeps the latter) and its
    # distributed-checkpoint package: they only find, read and restore a saved iteration
    # ("KeyError: 'state'" restoring an optimizer saved by another setup, Megatron-LM#3885)
    (
        "checkpoint_error",
        _MEGATRON_CHECKPOINTING,
        _MEGATRON_LOAD,
        _CHECKPOINT_EXC | {"TypeError", "IndexError"},
    ),
    (
        "checkpoint_error",
        re.compile(r"/megatron/core/dist_checkpointing/(?:\w+/)*\w+\.py$"),
        re.compile(r"\w*load\w*|validate\w*"),
        _CHECKPOINT_EXC | {"TypeError", "IndexError", "CheckpointingException"},
    ),
    # runtime/state_dict_factory.py: SDLoaderFactory / SDLoaderBase / MegatronSDLoader, which
    # only find, load, merge and split model-parallel checkpoint files (deepspeed 0.19.8)
    (
        "checkpoint_error",
        re.compile(r"/deepspeed/runtime/state_dict_factory\.py$"),
        None,
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        re.compile(r"/deepspeed/runtime/checkpoint_engine/\w+\.py$"),
        re.compile(r"load"),
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        # (load_sharded_checkpoint moved to trainer_utils.py in 5.x; _find_mismatched_keys
        # and _load_state_dict_into_model are 4.x names)
        re.compile(r"/transformers/(?:modeling_utils|trainer_utils)\.py$"),
        re.compile(
            r"load_state_dict|_load_state_dict_into_model|load_sharded_checkpoint"
            r"|_load_pretrained_model|_find_mismatched_keys"
        ),
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        re.compile(r"/transformers/(?:integrations/)?deepspeed\.py$"),
        re.compile(r"deepspeed_load_checkpoint|_load_state_dict_into_zero3_model"),
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        re.compile(r"/transformers/trainer\.py$"),
        re.compile(r"_load_from_checkpoint|_load_rng_state|_load_optimizer_and_scheduler"),
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        re.compile(r"/accelerate/(?:checkpointing|accelerator)\.py$"),
        re.compile(r"load_accelerator_state|load_custom_state|load_state"),
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        re.compile(r"/peft/utils/save_and_load\.py$"),
        re.compile(r"load_peft_weights|set_peft_model_state_dict|torch_load"),
        _CHECKPOINT_EXC,
    ),
    # (round 29) fairseq's checkpoint loading (checkpoint_utils.py load_checkpoint,
    # load_checkpoint_to_cpu, load_model_ensemble*; trainer.py Trainer.load_checkpoint), which
    # only find, read and restore a saved model ("Cannot load model parameters from checkpoint
    # X; please ensure that the architectures match.", facebookresearch/fairseq#4590)
    (
        "checkpoint_error",
        re.compile(r"/fairseq/(?:checkpoint_utils|trainer)\.py$"),
        re.compile(r"load_checkpoint\w*|load_model_ensemble\w*"),
        _CHECKPOINT_EXC | {"TypeError", "IndexError"},
    ),
    # (round 30) any library's checkpoint module (a file named for checkpoints:
    # nemo_rl/utils/automodel_checkpoint.py, a trainer's checkpoint.py or checkpoint_utils.py)
    # failing in its load, restore or resume function: a saved run that cannot be read back
    # ("FileNotFoundError: Failed to load model from '.../step_2/policy/weights/model' ...
    # Please verify your checkpoint layout.", NVIDIA-NeMo/RL#1624). Not torch's activation
    # checkpointing (torch/utils/checkpoint.py), which loads nothing; the frameworks above
    # with their own rows are looked up first.
    (
        "checkpoint_error",
        re.compile(r"/(?!torch/utils/)(?:[\w.-]+/)?\w*checkpoint\w*\.py$"),
        re.compile(r"(?:_?\w+_)?(?:load|restore|resume)\w*"),
        # (not TypeError: "load_model() got an unexpected keyword argument 'device'" from
        # accelerate/checkpointing.py is two packages' versions, kohya-ss/sd-scripts#1524)
        _CHECKPOINT_EXC,
    ),
    # (round 31, tune28) Stable-Baselines3's model loading: BaseAlgorithm.load and
    # set_parameters (common/base_class.py) over save_util.py's load_from_zip_file, which
    # reads the saved zip, and json_to_data, which cloudpickle-loads its objects (a class
    # the installed version no longer has: "AttributeError: Can't get attribute 'TrainFreq'
    # on <module ...type_aliases>", DLR-RM/stable-baselines3#441; another Python's pickle:
    # "TypeError: an integer is required (got type bytes)", rangl-labs/netzerotc#2; a zip
    # missing a key: "KeyError: 'policy_class'", uzh-rpg/flightmare#98). save_util.py's
    # json_to_data itself catches RuntimeError, TypeError and AttributeError and warns in
    # newer releases: those are the reading of a saved model, not two packages' versions.
    (
        "checkpoint_error",
        re.compile(r"/stable_baselines3/common/save_util\.py$"),
        re.compile(r"load_from_zip_file|json_to_data|load_from_pkl"),
        _CHECKPOINT_EXC | {"TypeError", "AttributeError"},
    ),
    (
        "checkpoint_error",
        re.compile(r"/stable_baselines3/common/base_class\.py$"),
        re.compile(r"load|set_parameters"),
        _CHECKPOINT_EXC,
    ),
    # (round 34, tune31) verl's FSDP wrap policy (utils/fsdp_utils.py get_fsdp_wrap_policy:
    # "Exception: Cannot find Qwen2VLDecoderLayer in pretrained model.", the config's wrap
    # class that the model has none of; hiyouga/EasyR1#15, which vendors verl): the launch's
    # distributed config, as accelerate's (above)
    (
        "ds_config_error",
        re.compile(r"/verl/utils/fsdp_utils\.py$"),
        re.compile(r"get_fsdp_wrap_policy"),
        _CONFIG_EXC,
    ),
    # (round 36, tune33) torch's distributed checkpoint loader (distributed/checkpoint/
    # state_dict_loader.py, which only reads a saved checkpoint: "assert metadata is not
    # None" in its local_step when the directory holds no .metadata; bghira/SimpleTuner#1880)
    (
        "checkpoint_error",
        re.compile(r"/torch/distributed/checkpoint/state_dict_loader\.py$"),
        None,
        _CHECKPOINT_EXC,
    ),
    # (round 27) Orbax (JAX's checkpointing): restoring or reading the metadata of a save
    # ("ValueError: cannot reshape array of size 2 into shape (1,64)" in type_handlers.py
    # _deserialize_sharding_from_json_string, a sharded save restored on another device
    # count, google/orbax#648); its save side's failures are left to the message rules
    (
        "checkpoint_error",
        re.compile(r"/orbax/checkpoint/(?:\w+/)*\w+\.py$"),
        re.compile(r"\w*(?:restore|deserializ|load|metadata)\w*"),
        _CHECKPOINT_EXC | {"TypeError", "IndexError"},
    ),
    # (issue 12, round 6) Optimizer and scheduler state restored from a checkpoint: torch
    # optim/optimizer.py Optimizer.load_state_dict ("loaded state dict contains a parameter
    # group that doesn't match the size of optimizer's group"; a KeyError or TypeError when
    # the saved state lacks "param_groups" or is None) and each optimizer's __setstate__
    # (optim/adamw.py: KeyError 'step' for a state saved by another torch), lr_scheduler.py
    # load_state_dict; Lightning's checkpoint connector (trainer/connectors/
    # checkpoint_connector.py: resume_start, restore*, _restore_modules_and_callbacks) and its
    # strategies' load_optimizer_state_dict / load_checkpoint
    (
        "checkpoint_error",
        re.compile(r"/torch/optim/(?:optimizer|lr_scheduler)\.py$"),
        re.compile(r"load_state_dict|_process_value_according_to_param_policy|__setstate__"),
        _CHECKPOINT_EXC | {"TypeError", "IndexError"},
    ),
    (
        "checkpoint_error",
        re.compile(r"/torch/optim/\w+\.py$"),
        re.compile(r"__setstate__"),
        _CHECKPOINT_EXC | {"TypeError", "IndexError"},
    ),
    (
        "checkpoint_error",
        re.compile(
            r"/(?:pytorch_)?lightning/(?:pytorch/)?trainer/connectors/checkpoint_connector\.py$"
        ),
        None,
        _CHECKPOINT_EXC | {"TypeError", "IndexError"},
    ),
    # (round 66, tune62) MXNet's NDArray loader (ndarray/utils.py load, mx.nd.load: reads a
    # saved .params file through the C API and nothing else; "mxnet.base.MXNetError: ...
    # local_filesys.cc:166: Check failed: allow_null  LocalFileSystem: fail to open
    # \"model/res50-fpn/.../rpn1-0000.params\"" on a resume from an epoch never saved,
    # TuSimple/mx-maskrcnn#29), the MXNetError raised through base.py's check_call (above)
    (
        "checkpoint_error",
        re.compile(r"/mxnet/ndarray/utils\.py$"),
        re.compile(r"load(?:_frombuffer)?"),
        _CHECKPOINT_EXC | {"MXNetError"},
    ),
    # (round 62, tune59) Paddle's paddle.load (framework/io.py: load, _legacy_load,
    # _load_selected_rows, _parse_load_result...), which only reads a saved file ("ValueError:
    # (InvalidArgument) Only version 0 SelectedRows is supported.", a .pdparams cut short;
    # PaddlePaddle/Paddle#56628)
    (
        "checkpoint_error",
        re.compile(r"/paddle/framework/io\.py$"),
        re.compile(r"_?\w*load\w*|_parse_load_result|_pickle_loads_mac|_unpack_saved_dict"),
        _CHECKPOINT_EXC,
    ),
    # (round 60, tune57) Lightning's checkpoint migration (utilities/migration/, which
    # upgrades a loaded checkpoint's dict from an older release: "KeyError: 'global_step'" in
    # _migrate_loop_global_step_to_progress_tracking, a checkpoint without the keys a
    # Lightning checkpoint has; sweetcocoa/pop2piano#15): it only ever reads a saved run
    (
        "checkpoint_error",
        re.compile(r"/(?:pytorch_)?lightning/(?:pytorch/)?utilities/migration/\w+\.py$"),
        None,
        _CHECKPOINT_EXC,
    ),
    (
        "checkpoint_error",
        re.compile(r"/(?:pytorch_)?lightning/(?:pytorch/)?strategies/\w+\.py$"),
        re.compile(r"load_optimizer_state_dict|load_checkpoint|load_model_state_dict"),
        _CHECKPOINT_EXC | {"TypeError", "IndexError"},
    ),
    # c10d: a collective, barrier or process-group setup that failed in the backend (not the
    # argument checks: _check_single_tensor, _get_default_group and friends raise for the
    # caller's mistakes), the rendezvous stores, torchelastic's rendezvous, DeepSpeed's comm
    # layer over them
    (
        "nccl_error",
        re.compile(r"/torch/distributed/distributed_c10d\.py$"),
        re.compile(
            r"all_reduce\w*|all_gather\w*|_all_gather_base|reduce_scatter\w*"
            r"|_reduce_scatter_base|broadcast\w*|barrier|monitored_barrier|_store_based_barrier"
            r"|reduce|all_to_all\w*|send|recv|isend|irecv|batch_isend_irecv|gather\w*"
            r"|scatter\w*|init_process_group|new_group|_new_group_with_tag"
            r"|_new_process_group_helper|send_object_list|recv_object_list"
        ),
        _NCCL_EXC,
    ),
    (
        "nccl_error",
        re.compile(r"/torch/distributed/rendezvous\.py$"),
        re.compile(
            r"_create_c10d_store|_tcp_rendezvous_handler|_env_rendezvous_handler"
            r"|_create_store_from_options|_rendezvous_helper|rendezvous"
        ),
        _NCCL_EXC,
    ),
    (
        "nccl_error",
        re.compile(r"/torch/distributed/elastic/(?:rendezvous/\w+|utils/store)\.py$"),
        None,
        _NCCL_EXC,
    ),
    (
        "nccl_error",
        re.compile(r"/deepspeed/comm/(?:torch|comm|ccl)\.py$"),
        re.compile(
            r"all_reduce\w*|all_gather\w*|reduce_scatter\w*|broadcast\w*|barrier"
            r"|monitored_barrier|reduce|all_to_all\w*|send|recv|isend|irecv|gather\w*"
            r"|scatter\w*|init_process_group|new_group|init_distributed"
        ),
        _NCCL_EXC,
    ),
    # (round 27) torch.distributions.Normal drawing a sample with a scale gone NaN: with
    # argument validation off (RL libraries turn it off for speed: rsl_rl's PPO), the only
    # check left is torch.normal's own "normal expects all elements of std >= 0.0", which NaN
    # fails; a policy's action std turned NaN mid-training (unitreerobotics/unitree_rl_lab#24).
    # Only from the distribution's sample: a script calling torch.normal with a negative std
    # of its own making raises the same words from its own line, the script's error.
    (
        "loss_divergence",
        re.compile(r"/torch/distributions/normal\.py$"),
        re.compile(r"r?sample"),
        frozenset({"RuntimeError"}),
    ),
)

# Shared memory, not a disk: POSIX semaphores and multiprocessing's heap/SharedMemory live
# in /dev/shm (RAM-backed), as do torch's shared CPU storages passed between DataLoader
# workers and ranks; ENOSPC raised there is host memory exhausted.
_SHM_FRAME = re.compile(
    r"/multiprocessing/(?:synchronize|heap|shared_memory|queues|context)\.py$"
    r"|/torch/(?:storage|multiprocessing/reductions)\.py$"
)


def frame_header(body: str) -> tuple[tuple[str, str], str] | None:
    """(path, function) of a traceback frame header line and what a paste glued onto the
    line after it, without its leading blanks ("" for a header alone), or None for any other
    line.

    Python ends a frame header with the function's name; an issue form or a chat paste that
    lost its line ends runs the source line, the next frames and the exception on after it
    ('File ".../distributed_c10d.py", line 1906, in broadcast 10: work = ... 10:
    torch.distributed.DistBackendError: NCCL error in: ...', awslabs/awsome-distributed-ai
    #192). Read as the header alone, the failure after it is never seen. Only the plain form
    can carry such a rest: the cut form ends at the line's end, rich's box and IPython's
    header end in their own punctuation.
    """
    rest = ""
    m = _PLAIN.match(body)
    if m is not None:
        rest = body[m.end() :]
    else:
        m = _PLAIN_CUT.match(body) or _RICH.match(body)
    if m is not None:
        path, func = m.group(1), m.group(2) or ""
    else:
        m = _IPYTHON.match(body)
        if m is None:
            return None
        path, func = m.group(1) or m.group(2), m.group(3)
    frame = "/" + _SLASHES.sub("/", path.replace("\\", "/")).lstrip("/"), func
    return frame, rest.lstrip()


def parse_frame(body: str) -> tuple[str, str] | None:
    """(path, function) of a traceback frame header line, or None for any other line."""
    header = frame_header(body)
    return None if header is None else header[0]


def frame_kind(frames: Sequence[tuple[str, str]], exc: str) -> str | None:
    """The kind (a FailureKind value) that the raise site of ``exc`` names, or None.

    ``frames`` are the traceback's frames, outermost first; ``exc`` is the exception class's
    last dotted component. The innermost frame outside the pass-through modules decides: a
    framework function whose raises all mean one kind names it, anything else names nothing.
    """
    site = _raise_site(frames)
    if site is None:
        return None
    path, func = site
    for kind, path_rx, func_rx, classes in _FRAME_TABLE:
        if (
            exc in classes
            and path_rx.search(path) is not None
            and (func_rx is None or func_rx.fullmatch(func) is not None)
        ):
            return kind
    return None


def _raise_site(frames: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """The innermost frame outside the pass-through modules (the code that raised), or None."""
    for frame in reversed(frames):
        if _PASS_THROUGH.search(frame[0]) is None:
            return frame
    return None


def in_shared_memory(frames: Sequence[tuple[str, str]]) -> bool:
    """True when the innermost frame creates or writes shared memory (see _SHM_FRAME)."""
    return bool(frames) and _SHM_FRAME.search(frames[-1][0]) is not None


# Functions whose every failure is of one kind, whatever the exception: they only check a
# config's numbers, a CUDA/compiler setup, or the fp16 loss scale. A traceback that passes
# through one names its kind even when the excerpt is cut before the exception line (a paste
# that stops mid-traceback); any other cut traceback names nothing. Checked in deepspeed 0.19.8
# (runtime/config.py; runtime/zero/stage3.py and stage_1_and_2.py _update_scale, which only
# calls fp16/loss_scaler.py update_scale, whose one raise is "Current loss scale already at
# minimum"), transformers integrations/deepspeed.py, torch utils/cpp_extension.py.
_CLOSED: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = (
    (
        "ds_config_error",
        re.compile(r"/deepspeed/runtime/config\.py$"),
        re.compile(
            r"_batch_assertion|_configure_train_batch_size|_set_batch_related_parameters"
            r"|_do_error_check"
        ),
    ),
    (
        "ds_config_error",
        re.compile(r"/transformers/(?:integrations/)?deepspeed\.py$"),
        re.compile(r"trainer_config_finalize|trainer_config_process|fill_match"),
    ),
    # (round 33, tune30) accelerate's FSDP plugin building its wrap policy from the config:
    # a traceback cut on its "raise Exception("Could not find the transformer layer class to
    # wrap in the model.")" (NovaSearch-Team/RAG-Retrieval#29) is the config failing, as its
    # raises all are (_FRAME_TABLE, round 32)
    (
        "ds_config_error",
        re.compile(r"/accelerate/utils/dataclasses\.py$"),
        re.compile(r"set_auto_wrap_policy"),
    ),
    # (round 44, tune41) mmcv's and mmengine's checkpoint loaders (runner/checkpoint.py:
    # load_checkpoint, _load_checkpoint and the load_from_* readers it dispatches to by the
    # path's scheme), which only find, read and match a saved model: a traceback cut inside
    # them, as a Jupyter paste of "EOFError  Traceback (most recent call last)" whose last
    # line is gone (open-mmlab/mmdetection#8204, cfg.load_from), is the checkpoint failing
    (
        "checkpoint_error",
        re.compile(r"/mm(?:cv|engine)/runner/checkpoint\.py$"),
        re.compile(r"_?load_checkpoint|load_from_\w+"),
    ),
    # (issue 12, round 5) DeepSpeed's model-parallel checkpoint loader: every assert there is
    # about the checkpoint files found ("assert len(self.ckpt_list) > 0" when none match,
    # world-size divisibility, missing keys; DeepSpeed PR #1322)
    (
        "checkpoint_error",
        re.compile(r"/deepspeed/runtime/state_dict_factory\.py$"),
        re.compile(r".+"),
    ),
    # (issue 12, round 10) Megatron's checkpoint loader (see _FRAME_TABLE): a traceback cut
    # inside load_checkpoint is a resume that failed, whichever rank's excerpt survived
    ("checkpoint_error", _MEGATRON_CHECKPOINTING, _MEGATRON_LOAD),
    # (issue 12, round 6) torch elastic's rendezvous (dynamic_rendezvous.py, the c10d and
    # etcd backends, utils.py): a traceback cut inside it is the rendezvous failing to reach
    # its store or its peers (RendezvousConnectionError, RendezvousTimeoutError,
    # RendezvousClosedError: "The connection to the C10d store has failed")
    (
        "nccl_error",
        re.compile(r"/torch/distributed/elastic/rendezvous/\w+\.py$"),
        re.compile(r".*"),
    ),
    (
        "loss_divergence",
        re.compile(r"/deepspeed/runtime/(?:zero/stage3|zero/stage_1_and_2|fp16/\w+)\.py$"),
        re.compile(r"_update_scale|update_scale"),
    ),
    (
        "ds_build_error",
        re.compile(r"/op_builder/\w+\.py$"),
        re.compile(r"assert_no_cuda_mismatch|installed_cuda_version|jit_load|builder"),
    ),
    (
        "ds_build_error",
        re.compile(r"/torch/utils/cpp_extension\.py$"),
        re.compile(
            r"_run_ninja_build|verify_ninja_availability|_check_cuda_version"
            r"|_write_ninja_file_and_build_library|_jit_compile|_build_extension_module"
            r"|check_compiler_ok_for_platform"
            # (round 7) or no function at all: rich wraps " in <func>" off a long path's line
            # ("│ .../torch/utils/cpp_extension.py:16 │" then "│ 23 in
            # _write_ninja_file_and_build_library │"); a training run is only ever inside
            # cpp_extension.py to build an op
            r"|"
        ),
    ),
)


def closed_frame_kind(frame: tuple[str, str]) -> str | None:
    """The kind a frame of a function in _CLOSED names on its own, or None."""
    path, func = frame
    for kind, path_rx, func_rx in _CLOSED:
        if path_rx.search(path) is not None and func_rx.fullmatch(func) is not None:
            return kind
    return None


# (issue 12, round 6) A generic exception raised on a line of the script's own code that
# restores a checkpoint: "optimizer.load_state_dict(ckpt['optimizer'])" -> KeyError:
# 'optimizer' (weights and optimizer state saved in separate files), "model.load_state_dict(
# torch.load(path)['model'])" -> TypeError: 'NoneType' object is not subscriptable (a
# checkpoint stripped of its state), TensorFlow's "saver.restore(sess, path)". The framework's
# own loaders are in _FRAME_TABLE; this is the script's call site, where the checkpoint's
# content did not match what the script expects. Not AttributeError or NameError: those are
# bugs in the line itself.
_LOAD_CALL = re.compile(
    r"\b(?:torch\.load|load_state_dict|load_checkpoint|load_from_checkpoint"
    r"|resume_from_checkpoint|load_optimizer_state_dict|safetensors\.torch\.load_file"
    r"|\w*[Ss]aver\.restore|checkpoint\.restore)\s*\("
)
_LOAD_EXC = frozenset(
    {"KeyError", "TypeError", "IndexError", "ValueError", "RuntimeError", "EOFError",
     "UnpicklingError", "AssertionError"}
)  # fmt: skip


# (issue 12, round 9) A generic exception raised on a line, in any library or script, that
# reads a key of the DeepSpeed config dict: accelerate's "if self.state.deepspeed_plugin.
# deepspeed_config["fp16"]["enabled"]:" -> KeyError: 'fp16' when the config has no fp16
# section (accelerate#1271), "ds_config['zero_optimization']['stage']" in a script. The key
# the config lacks or the value it holds is the cause, not the line.
_DS_CONFIG_READ = re.compile(r"\b(?:deepspeed_config|ds_config)\s*(?:\[|\.get\()")
_DS_CONFIG_EXC = frozenset({"KeyError", "TypeError", "ValueError"})


# (issue 12, round 11) A string where DeepSpeed's own code needs a number: a config value
# left as "auto" where no Trainer fills it in, or a number written in quotes. The TypeError is
# raised wherever DeepSpeed first uses the value, not where it reads the config: engine.py's
# "if self.gradient_clipping() > 0.0" (DeepSpeed#1270), lr_schedules.py's "max(2,
# warmup_num_steps)" under a scheduler built from the config (LianjiaTech/BELLE#558). Only a
# str against an int or a float, and only raised in DeepSpeed's code: the same message from
# torch.optim is a YAML loader reading "1e-5" as a string, the script's own config.
_STR_NUMBER = re.compile(
    r"(?:not supported between instances of|unsupported operand type\(s\) for [^:]{1,3}:)"
    r" '(?:str' and '(?:int|float)|(?:int|float)' and 'str)'"
)
# The package's own modules, not any path with a "deepspeed" directory in it: a user named
# deepspeed (/home/deepspeed/train.py, LianjiaTech/BELLE#558) runs scripts of their own. Not
# the launcher: its values are command-line arguments and hostfile entries, not the config
_DEEPSPEED_CODE = re.compile(
    r"/deepspeed/(?:__init__\.py$|(?:runtime|ops|utils|comm|moe|pipe|checkpoint|module_inject"
    r"|inference|compression|monitor|accelerator|sequence|linear|compile|io|nvme|autotuning"
    r"|profiling|datastates)/)"
)


def value_kind(frames: Sequence[tuple[str, str]], exc: str, message: str) -> str | None:
    """ds_config_error for a TypeError between a str and a number raised in DeepSpeed's own
    code (``_STR_NUMBER``), else None."""
    if exc != "TypeError" or _STR_NUMBER.search(message) is None:
        return None
    site = _raise_site(frames)
    if site is None or _DEEPSPEED_CODE.search(site[0]) is None:
        return None
    return "ds_config_error"


def source_kind(source: str, exc: str) -> str | None:
    """checkpoint_error when ``exc`` (a generic class) was raised on a source line that loads
    a checkpoint (``_LOAD_CALL``), ds_config_error on one that reads the DeepSpeed config
    (``_DS_CONFIG_READ``), else None."""
    if exc in _LOAD_EXC and _LOAD_CALL.search(source) is not None:
        return "checkpoint_error"
    if exc in _DS_CONFIG_EXC and _DS_CONFIG_READ.search(source) is not None:
        return "ds_config_error"
    return None
