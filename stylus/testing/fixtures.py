"""A pytest plugin (entry point `pytest11`, or `pytest_plugins = ["stylus.testing.fixtures"]`): the
`stylus_driver` fixture builds TestDrivers and closes every one at teardown, even when the test fails."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from stylus.testing.driver import TestDriver


@pytest.fixture
def stylus_driver() -> Iterator[Callable[..., TestDriver]]:
    """`stylus_driver("pipeline.yaml", processors=[...])`: takes TestDriver's arguments."""
    from stylus.testing.driver import TestDriver  # here: every pytest run loads the plugin, few use it

    drivers: list[TestDriver] = []

    def make(*args: Any, **kwargs: Any) -> TestDriver:
        driver = TestDriver(*args, **kwargs)
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.close()
