"""fedcompanion: a reproducible companion to FedVRA, CEADMM/ICEADMM and AdaFedAdam.

Quick start::

    import fedcompanion as fc
    task = fc.tasks.federated_dataset_task("mnist", 100, "dirichlet", alpha=0.1)
    result = fc.run(task, fc.algorithms.make("fedprox", mu=0.01), rounds=50, clients_per_round=10)
    result.metric("test_accuracy")
"""
from . import algorithms, data, engine, experiments, notebook, tasks
from .algorithms import make
from .engine import LocalWork, run
from .validation import ConfigError

__version__ = "0.1.0"
__all__ = [
    "ConfigError", "LocalWork", "algorithms", "data", "engine", "experiments", "make", "notebook", "run", "tasks",
]
