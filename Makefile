# suite: the two commands are `make bench` and `make test`; both do their own set-up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
MODEL  ?= tiny
PROFILE ?= standard
# auto: per arm, local where its runtime has a local recipe here, else Docker (NVIDIA runtime for a GPU arm).
LAUNCHER ?= auto
# Tests left out of `make test`: the long ones and those needing an NVIDIA GPU.
TEST_MARKERS ?= not slow and not gpu
PYTEST_ARGS ?=
# llama.cpp as `make test` builds it on the host: portable (the flags of the llamacpp image's build),
# so that the image takes this build instead of compiling it again (.ci/llama-build-context.sh).
# Empty: the host's usual choice (native, smoke-tested, portable where native fails), and the image
# compiles its own.
TEST_LLAMA_BUILD ?= portable

.PHONY: setup bench test typecheck faults site lint clean-site

$(BIN)/suite: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,ray]'
	touch $@

# Install the runtimes of the model's arms and prepare its formats (reused when present).
setup: $(BIN)/suite
	$(BIN)/suite setup --model $(MODEL) --launcher $(LAUNCHER)

# Each arm is prepared just before it runs; the site is rebuilt after each stage's result.
bench: $(BIN)/suite
	$(BIN)/suite bench --model $(MODEL) --profile $(PROFILE) --launcher $(LAUNCHER) --site

site: $(BIN)/suite
	$(BIN)/suite site

# The type checker and the linter over suite/ (configured in pyproject.toml); `make test` runs them first.
typecheck: $(BIN)/suite
	$(BIN)/mypy
	$(BIN)/ruff check suite

test: $(BIN)/suite typecheck
	SUITE_LLAMA_BUILD=$(TEST_LLAMA_BUILD) SUITE_LLAMA_PORTABLE_LEVEL=x86-64-v3 $(BIN)/suite setup --model tiny
	bash .ci/docker-setup.sh || echo "warning: Docker set-up failed; the Docker tests will say why they skip"
	bash .ci/llama-build-context.sh
	bash .ci/browser-setup.sh
	$(BIN)/python -m pytest -m "$(TEST_MARKERS)" $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "error: no tests ran"; exit 1; fi; exit $$rc

# Every injected fault in one go (tests marked `fault`), ending with one line over all of them:
# "N faults injected, 0 records lost or mixed, 0 tracebacks, 0 processes killed that the suite did not start".
faults: $(BIN)/suite
	$(BIN)/suite setup --model tiny
	$(BIN)/python -m pytest -m fault $(PYTEST_ARGS)

lint: $(BIN)/suite
	$(BIN)/hadolint images/*/Dockerfile
