"""fedcompanion: a reproducible companion to FedVRA, CEADMM/ICEADMM and AdaFedAdam.

Quick start::

    import fedcompanion as fc
    task = fc.tasks.federated_dataset_task("mnist", 100, "dirichlet", alpha=0.1)
    result = fc.run(task, fc.make("fedprox", mu=0.01), rounds=50, clients_per_round=10)
    result.metric("test_accuracy")
"""
from importlib import metadata as _metadata

from . import algorithms, data, driver, engine, experiments, losses, metrics, protocol, tasks
from .algorithms import make, register, register_algorithm
from .data.loaders import register_dataset
from .data.partition import register_partition
from .driver import run
from .engine import LocalWork, register_engine, register_sampling
from .experiments import register_metric, register_task
from .losses import register_loss
from .models import register_model
from .protocol import RunResult
from .registry import registry, seal
from .reproduction import notebook
from .validation import ConfigError

__version__ = _metadata.version("fedcompanion")  # one source: pyproject.toml (CITATION.cff and the site follow it)
__all__ = [
    "ConfigError", "LocalWork", "RunResult", "algorithms", "data", "driver", "engine", "experiments", "losses", "make",
    "metrics", "notebook", "protocol", "register", "register_algorithm", "register_dataset", "register_engine",
    "register_loss", "register_metric", "register_model", "register_partition", "register_sampling", "register_task",
    "registry", "run", "tasks",
]
seal()  # last: what registers from here on is a user's
