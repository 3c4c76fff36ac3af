"""Run any engine algorithm as a Flower app (``pip install 'fedcompanion[flower]'``).

The algorithm is unchanged: a Flower client runs :func:`fedcompanion.driver.client_work` for itself (the
same local objective, engine and mini-batch stream as ``fc.run``) and keeps its own part of the algorithm's
state (duals, control variates, private blocks, a carried momentum buffer) in Flower's ``context.state``; the
server keeps only the server part, draws the same clients and local step counts as ``fc.run`` for the same
seed, and aggregates with the algorithm's own ``server_update``. What crosses the network is exactly the
algorithm's broadcast and uploads (see :mod:`fedcompanion.protocol`).

* :func:`simulate`: one experiment (an :class:`~fedcompanion.experiments.ExperimentConfig`) on Flower's
  simulation engine, returning the same :class:`~fedcompanion.RunResult` as ``fc.run``;
* :func:`client_app`, :func:`server_app`: the ClientApp and the ServerApp (which announces each experiment to
  the nodes, so one federation can run several); :mod:`fedcompanion.flower.app` holds the two apps that
  ``flwr run`` loads (the experiment comes from the run config's ``experiment`` entry; see ``examples/flower``).
"""
try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("fedcompanion.flower needs Flower: pip install 'fedcompanion[flower]'") from exc

from .core import client_app, config_from_run_config, message_bytes, run_config_of, serve, server_app, simulate

__all__ = ["client_app", "config_from_run_config", "message_bytes", "run_config_of", "serve", "server_app",
           "simulate"]
