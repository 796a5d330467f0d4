"""What `autotuner serve` says when it starts: its store without the password, and what its tokens let
no one do (before, an operator met a service with no token as 401s, with nothing said)."""

from __future__ import annotations

import pytest

from api.cli import access_notes, shown_url
from api.settings import Settings


def test_the_store_is_named_without_its_password():
    said = shown_url("postgresql+psycopg://tuner:s3cret@db.internal:5432/autotuner")
    assert "s3cret" not in said
    assert said == "postgresql+psycopg://tuner:***@db.internal:5432/autotuner"
    assert shown_url("sqlite:////srv/autotuner.db") == "sqlite:////srv/autotuner.db"


@pytest.mark.parametrize(
    ("tokens", "public", "said"),
    [
        ("", False, "no token is configured (AUTOTUNER_TOKENS): every API request answers 401"),
        ("", True, "no write token is configured"),
        ("jobs:read", False, "no write token is configured"),
        ("jobs:read,infra:write", False, None),
        ("root:admin", False, None),
    ],
)
def test_tokens_that_leave_something_undoable_are_said(tmp_path, tokens, public, said):
    settings = Settings(data_dir=tmp_path, tokens=tokens, public_read=public)
    notes = access_notes(settings)
    if said is None:
        assert notes == []
    else:
        assert len(notes) == 1
        assert notes[0].startswith(said)


def test_the_scheduler_names_its_store_without_the_password(monkeypatch, tmp_path, caplog):
    # it logged the whole URL: the PostgreSQL password in the service's log
    from api import scheduler

    monkeypatch.setenv("AUTOTUNER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv(
        "AUTOTUNER_DATABASE_URL", "postgresql+psycopg://tuner:s3cret@db.internal:5432/autotuner"
    )

    class Queue:
        owner = "host:1:abc"

        def __init__(self, store, **kwargs):
            pass

        def start(self):
            pass

        def join(self):
            pass

    monkeypatch.setattr(scheduler, "Store", lambda url: None)  # no database to reach here
    monkeypatch.setattr(scheduler, "StudyQueue", Queue)
    monkeypatch.setattr(scheduler.signal, "signal", lambda *_: None)
    with caplog.at_level("INFO", logger="autotuner.scheduler"):
        scheduler.main()
    assert "running studies from postgresql+psycopg://tuner:***@db.internal:5432/autotuner" in caplog.text
    assert "s3cret" not in caplog.text


def test_a_data_dir_that_cannot_be_locked_is_said_and_the_service_still_starts(tmp_path, monkeypatch, capsys):
    # Lustre without -o flock (ENOSYS) or NFS without lockd (ENOLCK): every such error read as "another
    # service runs here", and the service could not start on the shared file system Slurm sites use
    import errno
    import fcntl

    from api.cli import hold_data_dir

    def no_locks(*_):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    held = hold_data_dir(tmp_path)
    assert not isinstance(held, str)
    assert (
        "cannot be locked (No locks available): nothing stops a second service on it"
        in capsys.readouterr().err
    )
    held.close()
