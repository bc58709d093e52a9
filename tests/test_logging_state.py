"""The suite's per-test logging restore (tests/logging_state.py): what a test changed is put back,
and what it left alone is not touched, so the restore costs one pass over the loggers."""

import logging

from logging_state import logging_as_it_was


def test_a_changed_level_and_an_added_handler_are_put_back() -> None:
    logger = logging.getLogger("recipe_engine.tests.restored")
    logger.setLevel(logging.WARNING)
    with logging_as_it_was():
        logger.setLevel(logging.DEBUG)
        added = logging.StreamHandler()
        logger.addHandler(added)
        logger.propagate = False
    assert logger.level == logging.WARNING
    assert added not in logger.handlers
    assert logger.propagate


def test_a_logger_the_test_left_alone_keeps_its_level_cache() -> None:
    """`Logger.setLevel` clears every logger's cache; restoring each unchanged level made the
    restore quadratic in a worker's loggers (80 ms a test, 210 s over the suite)."""
    untouched = logging.getLogger("recipe_engine.tests.untouched")
    untouched.isEnabledFor(logging.INFO)  # fills its cache
    with logging_as_it_was():
        pass
    assert logging.INFO in untouched._cache


def test_a_restored_parent_level_reaches_its_untouched_child_again() -> None:
    parent = logging.getLogger("recipe_engine.tests.parent")
    child = logging.getLogger("recipe_engine.tests.parent.child")
    parent.setLevel(logging.WARNING)
    with logging_as_it_was():
        parent.setLevel(logging.DEBUG)
        assert child.isEnabledFor(logging.DEBUG)
    assert not child.isEnabledFor(logging.DEBUG)
