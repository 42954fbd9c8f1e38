"""The fault tests' throwaway cluster (``tests.support.clusters``), never the machine's own
server: the tests stop, crash, restart and reconfigure it at will."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clusters import (
    BASE_SETTINGS,
    POSTGRES_BIN,
    ThrowawayCluster,
    binaries_or_skip,
    owned_scratch_folder,
    throwaway,
)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ThrowawayCluster]:
    """The session's throwaway cluster, running with the base settings."""
    binaries_or_skip(POSTGRES_BIN / "initdb")
    with throwaway(ThrowawayCluster(owned_scratch_folder("runledger-faults-"))) as made:
        yield made


@pytest.fixture
def running_cluster(cluster: ThrowawayCluster) -> Iterator[ThrowawayCluster]:
    """The cluster, up with the base settings before and after the test (whatever it did)."""
    if not cluster.is_running():
        cluster.start()
    yield cluster
    if cluster.is_running() and cluster.settings != {**BASE_SETTINGS, "port": str(cluster.port)}:
        cluster.stop()
    if not cluster.is_running():
        cluster.start()


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def database_url(running_cluster: ThrowawayCluster) -> str:
    """A new database of the running cluster, by a URL carrying the test password."""
    return running_cluster.create_database(f"faults_{next(_databases)}")
