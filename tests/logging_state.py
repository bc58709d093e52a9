"""Logging as it was before an in-process command: Hydra configures logging for each job it
runs (a console handler on the streams of that moment, a file handler in the job's folder),
and a test that captured those streams, or deleted that folder, leaves handlers that a later
test's log line meets closed ("--- Logging error ---" and a traceback on stderr). One process
per command, as users run the engine, never meets this."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


def _loggers() -> list[logging.Logger]:
    named = logging.Logger.manager.loggerDict.values()
    return [logging.getLogger(), *(lg for lg in named if isinstance(lg, logging.Logger))]


def _pytests(handler: logging.Handler) -> bool:
    """pytest's own capture handlers come and go with each test phase: left to pytest."""
    return type(handler).__module__.startswith("_pytest")


@contextlib.contextmanager
def logging_as_it_was() -> Iterator[None]:
    before = {id(lg): (lg.level, lg.disabled, lg.propagate, set(lg.handlers)) for lg in _loggers()}
    try:
        yield
    finally:
        for logger in _loggers():
            level, disabled, propagate, handlers = before.get(id(logger), (0, False, True, set()))
            for handler in [h for h in logger.handlers if h not in handlers and not _pytests(h)]:
                logger.removeHandler(handler)
                handler.close()
            for handler in handlers - set(logger.handlers):  # what a job's config replaced
                if not _pytests(handler):
                    logger.addHandler(handler)
            # `setLevel` clears the level cache of every logger, so calling it for each of a
            # worker's thousands of loggers was quadratic: 80 ms a test in the suite's workers
            # (210 s over the suite). Only a level a test changed is set back.
            if logger.level != level:
                logger.setLevel(level)
            logger.disabled, logger.propagate = disabled, propagate
