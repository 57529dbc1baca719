"""The one table of how each training framework names dsguard's knobs.

``dsguard init`` writes a job file from it; nothing else copies these names. Each row names
the framework, the versions it was read against, how knobs reach the script (``flags``: a
command-line flag each; ``dotlist``: ``key=value`` arguments after the config file, as
OmegaConf / Hydra take them; ``knobs_file``: keys of the script's own config file;
``deepspeed_config``: the DeepSpeed config the script reads), the checkpoint layout it
writes, whether its data is packed, and the public source file(s) the names were read from.
A name that changes between versions gets its own row with its own range.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["FRAMEWORKS", "Framework", "Route"]

Route = Literal["flags", "dotlist", "knobs_file", "deepspeed_config"]

_TF = "https://github.com/huggingface/transformers/blob/main/"
_HF_FLAGS: Mapping[str, str] = {
    "micro_batch_size": "--per_device_train_batch_size",
    "gradient_accumulation_steps": "--gradient_accumulation_steps",
    "gradient_checkpointing": "--gradient_checkpointing",
    "dataloader_workers": "--dataloader_num_workers",
    "pin_memory": "--dataloader_pin_memory",
}


@dataclass(frozen=True, slots=True)
class Framework:
    """One row: how a framework (in ``versions``) takes dsguard's knobs."""

    name: str
    versions: str
    route: Route
    #: knob -> flag (``flags``) or dotted key (``dotlist`` / ``knobs_file`` /
    #: ``deepspeed_config``).
    knobs: Mapping[str, str]
    #: Where the names were read (public source files).
    sources: tuple[str, ...]
    layout: str = "hf"
    #: How a resume reaches the script: a flag taking the path, or None (it resumes itself:
    #: HF's get_last_checkpoint, DeepSpeed's ``latest``).
    resume_flag: str | None = None
    #: The flag or key naming the output (checkpoint) dir.
    output: str | None = None
    #: The flag or key that turns packing on (None: never packs), or "always".
    packing: str | None = None
    #: The config file holding the knobs (``knobs_file`` / ``dotlist``): flag, or "" for the
    #: first positional ``.yaml`` argument.
    config_arg: str | None = None
    notes: tuple[str, ...] = field(default=())
    #: The script's parser is ``HfArgumentParser`` over ``TrainingArguments`` by construction
    #: (run_clm's ``main``; a script that merely imports TRL may parse its own flags), so
    #: every flag of ``knobs`` exists whether or not the command uses it:
    #: ``dsguard init`` maps them all. Without it run_clm's job lost its
    #: ``gradient_checkpointing`` and host-OOM worker/pinning rungs (no route).
    parses_training_arguments: bool = False


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework(
            "hf_trainer", "transformers 4.40 - 5.23", "flags",
            {**_HF_FLAGS, "max_length": "--model_max_length"},
            (_TF + "src/transformers/training_args.py",),
            resume_flag="--resume_from_checkpoint", output="--output_dir",
            notes=("max_length is the script's own flag: HF Trainer has none; check its name",),
        ),
        Framework(
            "run_clm", "transformers 4.40 - 5.23 examples", "flags",
            {**_HF_FLAGS, "max_length": "--block_size"},
            (_TF + "examples/pytorch/language-modeling/run_clm.py",
             _TF + "src/transformers/training_args.py"),
            resume_flag="--resume_from_checkpoint", output="--output_dir", packing="always",
            parses_training_arguments=True,
            notes=("group_texts concatenates texts into --block_size chunks: a max_length "
                   "move changes the dataset (a new phase)",),
        ),
        Framework(
            "trl", "trl >= 0.16 (max_length replaced max_seq_length; main f2cd577)",
            "flags", {**_HF_FLAGS, "max_length": "--max_length"},
            ("https://github.com/huggingface/trl/blob/main/trl/trainer/sft_config.py",),
            resume_flag="--resume_from_checkpoint", output="--output_dir", packing="--packing",
        ),
        Framework(
            "llamafactory", "LLaMA-Factory 0.9.6.dev0 (main ff6d4d1, 2026-08-18)", "dotlist",
            {"micro_batch_size": "per_device_train_batch_size",
             "gradient_accumulation_steps": "gradient_accumulation_steps",
             "max_length": "cutoff_len"},
            ("https://github.com/hiyouga/LLaMA-Factory/blob/main/src/llamafactory/hparams/data_args.py",
             "https://github.com/hiyouga/LLaMA-Factory/blob/main/src/llamafactory/hparams/parser.py",
             "https://github.com/hiyouga/LLaMA-Factory/blob/main/src/llamafactory/launcher.py"),
            output="output_dir", packing="packing", config_arg="",
            notes=("read_args merges OmegaConf.from_cli(sys.argv[2:]) over the YAML: key=value "
                   "overrides after the config file",
                   "resumes itself from get_last_checkpoint(output_dir) unless "
                   "overwrite_output_dir; dsguard sets torn checkpoints aside first",
                   "llamafactory-cli starts torchrun itself on several GPUs; dsguard runs "
                   "llamafactory.launcher under its own launcher instead"),
        ),
        Framework(
            "axolotl", "axolotl 0.18.0 (main 067b021, 2026-07-24)", "flags",
            {"micro_batch_size": "--micro_batch_size",
             "gradient_accumulation_steps": "--gradient_accumulation_steps",
             "max_length": "--sequence_len"},
            ("https://github.com/axolotl-ai-cloud/axolotl/blob/main/src/axolotl/utils/schemas/training.py",
             "https://github.com/axolotl-ai-cloud/axolotl/blob/main/src/axolotl/utils/schemas/config.py",
             "https://github.com/axolotl-ai-cloud/axolotl/blob/main/src/axolotl/cli/config.py"),
            resume_flag="--resume_from_checkpoint", output="output_dir",
            packing="sample_packing", config_arg="",
            notes=("axolotl.cli.train's fire kwargs override keys of the YAML (load_cfg)",),
        ),
        Framework(
            "torchtune", "torchtune main (recipes/configs, 0331778)", "dotlist",
            {"micro_batch_size": "batch_size",
             "gradient_accumulation_steps": "gradient_accumulation_steps",
             "max_length": "tokenizer.max_seq_len",
             "gradient_checkpointing": "enable_activation_checkpointing"},
            ("https://github.com/pytorch/torchtune/blob/main/recipes/configs/llama3_2/1B_full.yaml",),
            layout="auto", output="output_dir", packing="dataset.packed", config_arg="--config",
            notes=("resume is the recipe's own (resume_from_checkpoint=True with its "
                   "checkpointer's recipe_state); dsguard passes no resume argument",),
        ),
        Framework(
            "accelerate", "accelerate 1.x (checked 1.15)", "flags", {},
            ("https://github.com/huggingface/accelerate/blob/main/src/accelerate/checkpointing.py",
             "https://github.com/huggingface/accelerate/blob/main/src/accelerate/commands/launch.py"),
            layout="accelerate",
            notes=("the script's own flags: map them in flags:, and name its resume flag "
                   "(load_state PATH) in checkpoints.resume_flag",),
        ),
        Framework(
            "deepspeed", "DeepSpeed 0.14 - 0.19 (checked 0.19.8)", "deepspeed_config",
            {"micro_batch_size": "train_micro_batch_size_per_gpu",
             "gradient_accumulation_steps": "gradient_accumulation_steps",
             "zero_stage": "zero_optimization.stage"},
            ("https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/config.py",
             "https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/runtime/engine.py"),
            layout="deepspeed",
            notes=("the script resumes itself from out/latest (load_checkpoint); dsguard "
                   "points latest at the newest complete tag",),
        ),
    )
}  # fmt: skip
