"""The replica parameters of a PostgreSQL store URL: ``replica_url`` (repeatable, a URL of its
own, percent-encoded) and ``replica_wait``; neither reaches libpq, and no printed form shows a
replica's password."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from runledger.domain.errors import InvalidStoreParameterError
from runledger.infrastructure.storage.urls import libpq_url, read_postgres_url, redact_url

SECRET = "r3plica-pw"
REPLICA_A = f"postgresql://reader:{SECRET}@replica-a:5432/runs"
REPLICA_B = "postgresql://reader@replica-b:5433/runs?sslmode=require"


def with_replicas(*replicas: str, extra: str = "") -> str:
    query = "&".join(f"replica_url={quote(replica, safe='')}" for replica in replicas)
    return f"postgresql://alice@primary/runs?{query}{extra}"


def test_every_replica_url_is_kept_in_the_order_given() -> None:
    settings = read_postgres_url(with_replicas(REPLICA_A, REPLICA_B))

    assert settings.replica_url == (REPLICA_A, REPLICA_B)


def test_a_replica_connects_with_its_own_parameters_and_the_stores_timeout() -> None:
    settings = read_postgres_url(with_replicas(REPLICA_B, extra="&connect_timeout=3"))

    [conninfo] = settings.replica_conninfos
    assert "host=replica-b" in conninfo
    assert "sslmode=require" in conninfo
    assert "connect_timeout=3" in conninfo


def test_replica_parameters_do_not_reach_libpq() -> None:
    url = with_replicas(REPLICA_A, extra="&replica_wait=0.2&sslmode=disable")

    assert libpq_url(url) == "postgresql://alice@primary/runs?sslmode=disable"


def test_replica_wait_is_read_in_seconds_and_zero_means_no_wait() -> None:
    assert read_postgres_url(with_replicas(REPLICA_A, extra="&replica_wait=0.25")).replica_wait == (
        0.25
    )
    assert read_postgres_url(with_replicas(REPLICA_A, extra="&replica_wait=0")).replica_wait == 0


def test_without_replicas_reads_have_none_and_wait_the_default() -> None:
    settings = read_postgres_url("postgresql://alice@primary/runs")

    assert settings.replica_url == ()
    assert settings.replica_wait == 0.05


@pytest.mark.parametrize("wait", ["-1", "soon", "inf", "nan"])
def test_a_replica_wait_that_is_not_seconds_is_refused(wait: str) -> None:
    with pytest.raises(InvalidStoreParameterError, match="Store URL parameter replica_wait="):
        read_postgres_url(with_replicas(REPLICA_A, extra=f"&replica_wait={wait}"))


@pytest.mark.parametrize(
    "replica", ["replica-a:5432", "mysql://reader@replica/runs", "postgresql://h/db?bogus=1"]
)
def test_a_replica_url_that_is_not_a_postgresql_url_is_refused(replica: str) -> None:
    with pytest.raises(InvalidStoreParameterError, match=r"replica_url=.*must be a postgresql://"):
        read_postgres_url(with_replicas(replica))


def test_a_refused_replica_url_is_shown_without_its_password() -> None:
    with pytest.raises(InvalidStoreParameterError) as raised:
        read_postgres_url(with_replicas(f"postgresql://reader:{SECRET}@replica/runs?bogus=1"))

    assert SECRET not in str(raised.value)


def test_a_printed_store_url_never_shows_a_replicas_password() -> None:
    printed = redact_url(with_replicas(REPLICA_A, REPLICA_B))

    assert SECRET not in printed
    assert "replica-a" in printed


def test_the_settings_repr_never_shows_a_replicas_password() -> None:
    assert SECRET not in repr(read_postgres_url(with_replicas(REPLICA_A)))
