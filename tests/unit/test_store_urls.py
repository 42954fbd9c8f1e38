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
