# fedcompanion: `make reproduce` regenerates every figure, `make test` proves code and notebooks.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: env test unit notebooks reproduce reproduce-smoke lab bench lint clean

# The environment: a venv made from pyproject.toml (conda users: environment.yml), plus a
# Jupyter kernel named "fedcompanion" registered inside it.
$(STAMP): pyproject.toml
	@echo ">> creating $(VENV) (first time: a few minutes; torch comes from this machine's wheels)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,flower]'
	$(BIN)/python -m ipykernel install --sys-prefix --name fedcompanion --display-name "Python (fedcompanion)" >/dev/null
	@touch $(STAMP)

env: $(STAMP)

# Unit tests, every notebook executed by papermill with the smoke profile, then nbval re-runs the
# executed copies and requires the marked summary outputs to come out identical (determinism).
test: $(STAMP)
	$(BIN)/pytest -q
	$(BIN)/pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env build/executed

unit: $(STAMP)
	$(BIN)/pytest -q -m "not notebook"

reproduce: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduce --profile paper

reproduce-smoke: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduce --profile smoke

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

bench: $(STAMP)
	$(BIN)/python benchmarks/engine.py
	$(BIN)/python benchmarks/ceadmm.py

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

# Build products only: never data/, results/ or figures/.
clean:
	rm -rf build .pytest_cache src/*.egg-info
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
