"""The package's diagnostics reach standard error once an entry point configures logging, and only then."""
import logging

import pytest

from fedcompanion import logs


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


def test_without_configure_nothing_is_added(clean_logger):
    logging.getLogger("fedcompanion.flower").warning("lost")
    assert clean_logger.handlers == [] and clean_logger.propagate
