# One-command entry points. Each target creates its own environment on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test lint unit demo demo-scripted clean

# torch is pinned here, not in the package metadata: 2.13.0 is the local CPU build on this
# kind of machine (any other spec pulls a multi-GB CUDA build). DeepSpeed installs without
# prebuilt ops (DS_BUILD_OPS=0) and JIT-compiles what it needs on first use.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	DS_BUILD_OPS=0 $(PY) -m pip install -q -e '.[dev,train,notify]'
	touch $@

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

unit: $(VENV)/.installed
	$(PY) -m pytest -q

# The README's test command: lint, types, and the whole test suite.
test: lint unit

# The embedded CPU demo (configs/examples/tiny-cpu.yaml): real training under a real host
# memory limit fails at micro-batch 8 and dsguard heals it. Ends with a short summary.
demo: $(VENV)/.installed
	rm -rf runs/tiny-cpu && mkdir -p runs/tiny-cpu
	@# DeepSpeed JIT-builds its CPU comm op at start; built inside the attempt's 2.5 GiB memory
	@# cgroup, the compiler itself is OOM-killed and the demo would "heal" that instead of the
	@# training's own OOM. Build it once here, outside the limit (a no-op once built).
	$(VENV)/bin/python -c "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()" >/dev/null 2>&1 || true
	$(VENV)/bin/dsguard run configs/examples/tiny-cpu.yaml --quiet; \
	code=$$?; echo; echo "== summary (runs/tiny-cpu/events.jsonl) =="; \
	$(VENV)/bin/dsguard events runs/tiny-cpu \
	  --event memory_limit_applied --event attempt_started --event attempt_finished \
	  --event sigkill_judged --event failure_detected --event rungs_skipped \
	  --event policy_applied \
	  --event run_succeeded --event run_gave_up; \
	$(VENV)/bin/dsguard report runs/tiny-cpu; exit $$code

# The same supervisor against the scripted stand-in trainer (no torch needed).
demo-scripted: $(VENV)/.installed
	rm -rf runs/demo-scripted && mkdir -p runs/demo-scripted
	$(VENV)/bin/dsguard run configs/examples/demo-scripted.yaml --quiet; \
	code=$$?; $(VENV)/bin/dsguard events runs/demo-scripted \
	  --event attempt_started --event failure_detected --event policy_applied \
	  --event run_succeeded --event run_gave_up; \
	$(VENV)/bin/dsguard report runs/demo-scripted; exit $$code

clean:
	rm -rf $(VENV) runs .mypy_cache .ruff_cache .pytest_cache src/*.egg-info
