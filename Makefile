# fedcompanion: `make reproduce` regenerates every figure and the report, `make test` proves code and notebooks.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Where torch comes from: the default registry (PyPI's Linux wheel brings CUDA libraries, 6.5 GB in .venv), or a
# CPU-only index, e.g. `make env TORCH_INDEX=https://download.pytorch.org/whl/cpu` (not reachable from the machines
# this project is tested on, whose registry has no CPU-only torch 2.14.1).
TORCH_INDEX ?=

.PHONY: env test check unit notebooks reproduce reproduce-smoke arena extended setting-a verify verify-figures html screenshots lab bench lint clean

# The environment: a venv made from pyproject.toml (conda users: environment.yml) with the [flower] extra, plus a
# Jupyter kernel registered inside it. torch and torchvision first, at the versions tested (this machine's wheels).
$(STAMP): pyproject.toml
	@echo ">> creating $(VENV) (first time: a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.14.1 torchvision==0.29.1 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install --quiet -e '.[dev,flower,dask]'
	$(BIN)/python -m ipykernel install --sys-prefix --name fedcompanion --display-name "Python (fedcompanion)" >/dev/null
	@touch $(STAMP)

env: $(STAMP)

# Everything, in two lanes side by side (tests/suite.py): every notebook under papermill with the smoke profile (one
# per core, as `make reproduce` runs them, from an empty cache), the site from those copies, then nbval over them
# (reading the runs they stored), requiring the marked outputs to come out identical, one run of every method
# recomputed bit for bit (determinism) and a smoke-sized subset of the committed figure runs recomputed and compared
# (verify); beside it, every other test (Flower included, one thread).
test: $(STAMP)
	$(BIN)/python tests/suite.py

unit: $(STAMP)
	$(BIN)/pytest -q -m "not notebook"

# The fast tier for the inner loop (about 5 minutes on 2 cores): the unit tests without the notebooks, Flower and the
# few unit tests over 10 s (marked slow), one pytest worker per core (pytest-xdist; an idle worker takes tests from a
# busy one), each with one thread as in `make test`'s units lane; `make test` runs them all. CHECK_JOBS=1: one process.
CHECK_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
check: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
	  $(BIN)/pytest -q -n $(CHECK_JOBS) --dist worksteal -m "not notebook and not flower and not slow"

reproduce: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduction.reproduce --profile paper

# The arena (notebooks/92_arena.ipynb): every engine algorithm on three tasks under one tuning budget; AdaFedAdam's
# ablation under the same protocol (adafedadam/06_ablation), FedVRA's robustness and its stepsize rules at the arena's
# tuned settings (fedvra/07_robustness, fedvra/08_stepsize_rules). Their own target: their runs would take
# `make reproduce` past its time budget.
arena: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduction.reproduce --profile paper --only 92_arena --only adafedadam/06_ablation \
		--only fedvra/07_robustness --only fedvra/08_stepsize_rules

# The papers' claims beyond the reproduction's budget: CEADMM and ICEADMM without convexity, the sweeps over the
# number of clients and the dimension with CPU time (notebooks/ceadmm/02_beyond_convexity), and the semi-supervised
# form of FedVRA's two-block extension (notebooks/fedvra/09_semi_supervised). One notebook at a time, each with every
# core for its sweeps: side by side, each would keep one sweep process, and one core would idle once fedvra/09 ends.
extended: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduction.reproduce --profile paper --parallel 1 --only ceadmm/02_beyond_convexity \
		--only fedvra/09_semi_supervised

# AdaFedAdam's setting A (the authors': 5 clients, full participation) at the paper's 200 rounds: notebook 3 whole (the
# speed and fairness claims in A and B) and notebook 4 whole (the alpha front in A and B). `make reproduce` runs their
# setting B alone; one round of A processes all 48,000 training images. One notebook at a time, with every core.
setting-a: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduction.reproduce --profile paper --parallel 1 --only adafedadam/03_adafedadam \
		--only adafedadam/04_fairness_front

reproduce-smoke: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduction.reproduce --profile smoke

# Recompute committed figure runs from scratch and compare with results/ (exact, or within the stated tolerance).
verify: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduction.verify --subset smoke

verify-figures: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduction.verify --subset figures

html: $(STAMP)
	$(BIN)/python -m fedcompanion.reproduction.site --paper

# docs/screenshots/: the built site's front page, a notebook page and the report, in headless Chromium (offline)
screenshots: html
	$(BIN)/python -m fedcompanion.reproduction.site --screenshots

# JupyterLab on notebooks/ with the project's kernel; as root (containers, CI images) it needs --allow-root.
# Options pass through: `make lab ARGS="--no-browser --port 8899"`.
ARGS ?=
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/engine.py
	$(BIN)/python benchmarks/ceadmm.py
	$(BIN)/python benchmarks/reproduce_bound.py

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

# Build products only: never data/, results/ or figures/.
clean:
	rm -rf build .pytest_cache src/*.egg-info
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
