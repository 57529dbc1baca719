"""A torchrun worker for tests/test_engines.py: records what torchrun told it (its rank in
the multi-node world) and exits 0; the flags dsguard appends are ignored."""

import json
import os
import sys

out = sys.argv[sys.argv.index("--out") + 1]
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "DSGUARD_RUN_ID", "TORCHELASTIC_RUN_ID")
with open(os.path.join(out, f"rank-{os.environ['RANK']}.json"), "w", encoding="utf-8") as fh:
    json.dump({k: os.environ.get(k) for k in keys}, fh)
