"""Store URLs: printed without their password; runledger's pool parameters read and taken out
before libpq sees the URL; anything neither knows refused."""

from __future__ import annotations

import pytest

from runledger.domain.errors import InvalidStoreParameterError, InvalidStoreUrlError
from runledger.infrastructure.runtime import open_backend
from runledger.infrastructure.storage.urls import libpq_url, read_postgres_url, redact_url

SECRET = "s3cr%40t-pw"


@pytest.mark.parametrize(
    ("url", "printed"),
    [
        (f"postgresql://alice:{SECRET}@db:5432/runs", "postgresql://alice:***@db:5432/runs"),
        (
            f"postgresql://alice:{SECRET}@db/runs?sslmode=require",
            "postgresql://alice:***@db/runs?sslmode=require",
        ),
        (
            f"postgresql://alice@db/runs?password={SECRET}&pool_size=2",
            "postgresql://alice@db/runs?password=***&pool_size=2",
        ),
        (f"postgres://:{SECRET}@[::1:5432/runs", "postgres://:***@[::1:5432/runs"),
        ("postgresql://alice@db/runs", "postgresql://alice@db/runs"),
        ("sqlite:///tmp/runledger.db", "sqlite:///tmp/runledger.db"),
        ("memory://", "memory://"),
    ],
)
def test_a_printed_url_never_shows_the_password(url: str, printed: str) -> None:
    assert redact_url(url) == printed


def test_pool_parameters_are_read_and_kept_from_libpq() -> None:
    settings = read_postgres_url(
        f"postgresql://alice:{SECRET}@db:6543/runs?pool_size=3&max_overflow=0"
        "&connect_timeout=2&pool_timeout=1.5&application_name=host"
    )

    assert (settings.pool_size, settings.max_overflow) == (3, 0)
    assert (settings.connect_timeout, settings.pool_timeout) == (2, 1.5)
    assert settings.endpoint == "alice@db:6543/runs"
    assert "pool_size" not in settings.conninfo
    assert "application_name=host" in settings.conninfo
    assert "connect_timeout=2" in settings.conninfo
    assert SECRET not in repr(settings)


def test_defaults_apply_without_parameters() -> None:
    settings = read_postgres_url("postgresql://alice@db/runs")

    assert (settings.pool_size, settings.max_overflow) == (5, 10)
    assert (settings.connect_timeout, settings.pool_timeout) == (5, 5.0)


def test_libpq_gets_the_url_without_runledgers_parameters() -> None:
    url = "postgresql://alice@db/runs?pool_size=3&sslmode=disable"

    assert libpq_url(url) == "postgresql://alice@db/runs?sslmode=disable"


def test_an_unknown_parameter_is_refused_by_name() -> None:
    with pytest.raises(InvalidStoreParameterError, match="'pool_sise': unknown"):
        read_postgres_url("postgresql://alice@db/runs?pool_sise=3")


@pytest.mark.parametrize(
    "query", ["pool_size=0", "max_overflow=-1", "connect_timeout=soon", "pool_timeout=0"]
)
def test_an_out_of_range_pool_parameter_is_refused(query: str) -> None:
    name = query.partition("=")[0]
    with pytest.raises(InvalidStoreParameterError, match=f"Store URL parameter {name}="):
        read_postgres_url(f"postgresql://alice@db/runs?{query}")


def test_an_unsupported_url_is_reported_without_its_password() -> None:
    with pytest.raises(InvalidStoreUrlError) as raised:
        open_backend(f"mysql://alice:{SECRET}@db/runs")

    assert SECRET not in str(raised.value)
    assert "mysql://alice:***@db/runs" in str(raised.value)


def test_pooler_transaction_is_read_and_taken_out_before_libpq() -> None:
    settings = read_postgres_url("postgresql://alice@bouncer:6432/runs?pooler=transaction")

    assert settings.transaction_pooled
    assert "pooler" not in settings.conninfo


def test_without_a_pooler_or_through_a_session_pooler_connections_are_direct() -> None:
    assert not read_postgres_url("postgresql://alice@db/runs").transaction_pooled
    assert not read_postgres_url("postgresql://alice@db/runs?pooler=session").transaction_pooled


def test_through_a_transaction_pooler_without_listen_url_nothing_listens() -> None:
    settings = read_postgres_url("postgresql://alice@bouncer/runs?pooler=transaction")

    assert settings.listen_conninfo is None


def test_a_direct_store_listens_on_its_own_connection() -> None:
    settings = read_postgres_url("postgresql://alice@db/runs?pool_size=2")

    assert settings.listen_conninfo == settings.conninfo


def test_listen_url_names_where_to_listen_through_a_transaction_pooler() -> None:
    settings = read_postgres_url(
        "postgresql://alice@bouncer/runs?pooler=transaction"
        "&listen_url=postgresql%3A%2F%2Falice%40db%3A5432%2Fruns"
    )

    assert settings.listen_conninfo is not None
    assert "host=db" in settings.listen_conninfo
    assert "port=5432" in settings.listen_conninfo


@pytest.mark.parametrize("query", ["pooler=statement", "listen_url=mysql%3A%2F%2Fdb"])
def test_a_wrong_pooler_or_listen_url_is_refused(query: str) -> None:
    name = query.partition("=")[0]
    with pytest.raises(InvalidStoreParameterError, match=f"Store URL parameter {name}="):
        read_postgres_url(f"postgresql://alice@db/runs?{query}")


def test_a_printed_url_hides_the_password_of_its_listen_url() -> None:
    url = (
        "postgresql://alice@bouncer/runs?pooler=transaction"
        f"&listen_url=postgresql%3A%2F%2Falice%3A{SECRET.replace('%', '%25')}%40db%2Fruns"
    )

    assert "s3cr" not in redact_url(url)


def test_a_refused_listen_url_is_reported_without_its_password() -> None:
    with pytest.raises(InvalidStoreParameterError) as raised:
        read_postgres_url("postgresql://alice@db/runs?listen_url=mysql%3A%2F%2Fbob%3Ahunter2%40db")

    assert "hunter2" not in str(raised.value)
    assert "listen_url=" in str(raised.value)
