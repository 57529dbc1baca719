"""The overnight queue on one workstation (``dsguard queue``) and the cluster entrypoints
(``dsguard submit --slurm``).

The queue is not a second supervisor: each job is a normal ``dsguard run JOB`` child with its
own lock, log dir and events, so healing, resuming and ``dsguard status`` work exactly as for
a job started by hand. What the queue adds is order (priority, ``--after``), placement (whole
GPUs, CPU slots, host memory) and a crash-safe record of what it started (SQLite).
"""
