"""The package's diagnostics reach standard error once an entry point configures logging, and only then."""
import logging

import pytest

from fedcompanion.infra import logs


@pytest.fixture
def clean_logger():
    logger = logging.getLogger(logs.LOGGER)
    saved = logger.handlers[:], logger.level, logger.propagate
    logger.handlers, logger.propagate = [], True  # as a fresh process has it (other tests may have configured it)
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.handlers, logger.propagate = saved[0], saved[2]
    logger.setLevel(saved[1])


def test_configure_adds_one_handler_and_a_child_logger_reaches_it(clean_logger, capsys):
    logs.configure()
    logs.configure(logging.WARNING)
    assert len(clean_logger.handlers) == 1 and clean_logger.level == logging.WARNING
    logs.configure()
    logging.getLogger("fedcompanion.flower").info("stored the results of %s", "x")
    assert capsys.readouterr().err == "INFO fedcompanion.flower: stored the results of x\n"
    assert not clean_logger.propagate  # no second copy through a root handler


def test_importing_the_package_configures_nothing():
    """Only an entry point calling configure() gives the logger a handler: importing the package (its command line
    and Flower parts included) in a fresh process leaves a user's logging as the user set it."""
    import subprocess
    import sys

    code = ("import logging, fedcompanion, fedcompanion.cli, fedcompanion.flower.core; "
            "logger = logging.getLogger('fedcompanion'); "
            "print(len(logger.handlers), logger.propagate, len(logging.getLogger().handlers))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "True", "0"]
