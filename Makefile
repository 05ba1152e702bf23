# Two commands a new user needs: `make demo` and `make test`. Each builds the venv it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Test modules that mypy --strict checks too (the provider adapters against the SDKs' types).
TYPED_TESTS := tests/test_provider_sdks.py

.PHONY: demo test lint bench clean

$(BIN)/dsh-tools: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(BIN)/dsh-tools
	$(BIN)/dsh-tools demo

test: $(BIN)/dsh-tools
	$(BIN)/python -m pytest

lint: $(BIN)/dsh-tools
	$(BIN)/ruff check dsh_tools tests benchmarks examples
	$(BIN)/mypy --strict dsh_tools $(TYPED_TESTS)

bench: $(BIN)/dsh-tools
	$(BIN)/dsh-tools bench

clean:
	rm -rf $(VENV)
