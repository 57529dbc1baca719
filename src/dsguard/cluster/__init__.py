"""dsguard inside cluster engines: the scripts and contracts that make it the entrypoint
(Slurm's batch script today); pure rendering, no scheduler calls (those are the CLI's)."""
