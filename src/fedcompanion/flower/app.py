"""The two apps ``flwr run`` loads (see ``examples/flower/pyproject.toml``): the experiment comes from the run
config's ``experiment`` entry (an :class:`~fedcompanion.experiments.ExperimentConfig` as JSON), and each
SuperNode's ``partition-id`` node config says which client of the task it is."""
from .core import client_app as _client_app
from .core import server_app as _server_app

client_app = _client_app()
server_app = _server_app()
