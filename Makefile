# Two commands a new user needs: `make demo` and `make test`. Each builds the venv it needs:
# the demo installs only the runtime dependencies, the tests add the `test` extra.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# -qq: pip reports errors only; its build step would otherwise print setuptools' notice about
# editable installs, which is meant for packagers, not for someone trying the demo.
PIP := $(BIN)/pip install -qq --disable-pip-version-check
# compat: the checkout goes on sys.path through a .pth entry, which type checkers (mypy) and
# editors follow; setuptools' default import hook is invisible to them.
EDITABLE := --config-settings editable_mode=compat -e
RUNTIME := $(VENV)/.runtime-installed
TESTING := $(VENV)/.test-installed
# Test modules that mypy --strict checks too (the provider adapters against the SDKs' types,
# @tool definitions as user code reads them).
TYPED_TESTS := tests/test_provider_sdks.py tests/test_tool_typing.py

.PHONY: demo test lint bench clean

$(BIN)/python:
	@echo "make: creating the virtual environment $(VENV) with $(PYTHON)"
	@$(PYTHON) -m venv $(VENV)
	@echo "make: upgrading pip in $(VENV)"
	@$(PIP) --upgrade pip

$(RUNTIME): pyproject.toml | $(BIN)/python
	@echo "make: installing dsh-tools and its runtime dependencies" \
		"(pykka, msgspec, structlog, docstring-parser)"
	@$(PIP) $(EDITABLE) .
	@touch $@

# The test extra includes the runtime dependencies, so it satisfies the demo too.
$(TESTING): pyproject.toml | $(BIN)/python
	@echo "make: installing dsh-tools with its test extra (pytest, hypothesis, ruff, mypy, mcp," \
		"openai, anthropic, ray); the first time takes about a minute"
	@$(PIP) $(EDITABLE) '.[test]'
	@touch $@ $(RUNTIME)

# The development environment (the test extra) under the name the scripts have always used.
$(BIN)/dsh-tools: $(TESTING)
	@touch $@

demo: $(RUNTIME)
	@echo "make: running dsh-tools demo"
	@$(BIN)/dsh-tools demo

test: $(TESTING)
	$(BIN)/python -m pytest

lint: $(TESTING)
	$(BIN)/ruff check dsh_tools tests benchmarks examples
	$(BIN)/mypy --strict dsh_tools $(TYPED_TESTS)

# The bench extra brings the peers measured beside us (Monty for Code Mode).
BENCHING := $(VENV)/.bench-installed
$(BENCHING): pyproject.toml | $(RUNTIME)
	@echo "make: installing the bench extra (pydantic-monty, the Code Mode peer)"
	@$(PIP) $(EDITABLE) '.[bench]'
	@touch $@

bench: $(BENCHING)
	$(BIN)/dsh-tools bench

clean:
	rm -rf $(VENV)
