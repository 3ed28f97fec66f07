"""Suite-wide test settings: hypothesis runs without deadlines or the too-slow health check,
because CI machines are shared and slow generation there is noise, not a defect."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "runfold", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("runfold")


# ---- the PostgreSQL store: one server per session, both stores by one parametrised fixture ----

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402

from pg_support import start_postgres, workspace_url  # noqa: E402

pytest_plugins = ["tmux_support"]  # the `pane_for` fixture of the terminal tests


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """The DSN of a real PostgreSQL server started for this session (stopped at its end)."""
    server = start_postgres()
    try:
        yield server.dsn
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres: str) -> str:
    """A store URL naming a fresh, empty workspace on the session's server."""
    return workspace_url(postgres)


@pytest.fixture(params=["file", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """Each store a workspace can keep its ledger in: None for the file ledger (the default),
    else a `postgresql://…` URL of a fresh workspace. Tests taking it run once per store."""
    if request.param == "file":
        return None
    url: str = request.getfixturevalue("pg_url")
    return url
