"""A training stand-in for tests/test_queue.py: records the CUDA_VISIBLE_DEVICES dsguard gave
it, then waits for a go file (so the test decides when it ends); dsguard's flags are ignored."""

import os
import sys
import time

out = sys.argv[sys.argv.index("--out") + 1]
go = sys.argv[sys.argv.index("--go") + 1]
with open(out, "w", encoding="utf-8") as fh:
    fh.write(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
deadline = time.monotonic() + 120
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.1)
