"""The GPU proof harness (issue 7): dsguard healing real CUDA OOMs on one capped GPU.

``bench/gpu/configs.py`` holds the LLaMA-style model shapes, the memory estimates and the
scenarios (one job file each, generated into a run dir); ``bench/gpu/run.py`` runs them with
``dsguard run`` and collects the figures; ``bench/gpu/prepare_wheels.sh`` builds the wheels the
GPU machine (no network) must carry and prints the device command lines. ``--dry-run`` runs the
same harness on the CPU with a tiny model and a host-memory limit instead of the GPU cap.
"""
