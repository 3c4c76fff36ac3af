"""Tasks: a model, a loss and per-client data (:mod:`.core`: :class:`Task`, :func:`from_client_arrays`), the
tasks built by name (:mod:`.builders`: :data:`TASKS`, :func:`register_task`), the semi-supervised one
(:mod:`.semi_supervised`) and a convex task's linear view (:mod:`.convex`: its design, optimum and client blocks)."""
from .builders import (
    QSAR_SETTINGS,
    TASKS,
    clustering_task,
    federated_dataset_task,
    is_partitioned,
    least_squares_task,
    qsar_logistic_task,
    register_task,
    synthetic_task,
)
from .convex import linear_design
from .core import ClientSplit, Task, from_client_arrays, task_digest
from .semi_supervised import SOFT_LABELS, semi_supervised_task

__all__ = [
    "QSAR_SETTINGS", "SOFT_LABELS", "TASKS", "ClientSplit", "Task", "clustering_task",
    "federated_dataset_task", "from_client_arrays", "is_partitioned", "least_squares_task", "linear_design",
    "qsar_logistic_task", "register_task", "semi_supervised_task", "synthetic_task", "task_digest",
]
