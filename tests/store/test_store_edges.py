"""Stores this version cannot use, and numbers no store holds: each a line saying what is wrong and
exit 2, never a traceback. A store a newer nccl-autotuner wrote (a schema revision this code does not
know), one that needs migrating where its schema lock cannot be taken (a read-only mount), a file that
is not a database under `autotuner serve`, and node counts, pages and offsets past what the REST API
takes (they reached the database driver: OverflowError)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from alembic import command
from sqlalchemy import text
from typer.testing import CliRunner

from autotuner.cli.commands import app
from autotuner.store import Store
from autotuner.store.db import VERSION_TABLE, alembic_config, make_engine
from tests.helpers import skip_or_fail

runner = CliRunner()
FIELDS = dict(env={}, fwd_precision="fp16", bwd_precision="fp16", batch_size=512, sharding="table_wise")
NEWER = "this store was written by a newer nccl-autotuner (schema 0016; this version knows up to 0015): upgrade nccl-autotuner"
HUGE = "99999999999999999999"


def published(url: str) -> None:
    store = Store(url)
    try:
        store.upsert_workload("w", {"name": "w", "tables": []})
        store.publish_config(cluster="c", workload="w", nodes=1, **FIELDS)
    finally:
        store.dispose()


def written_by_a_newer_version(url: str) -> None:
    published(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '0016'"))
    engine.dispose()


def serve(tmp_path, url: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    env.update(AUTOTUNER_DATA_DIR=str(tmp_path / "data"), AUTOTUNER_DATABASE_URL=url, AUTOTUNER_PORT="1")
    return subprocess.run([sys.executable, "-m", "autotuner", "serve", "--no-scheduler"], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip


def said(result) -> str:
    return " ".join(result.output.split())  # the console wraps at 80 columns


@pytest.mark.parametrize(
    "args",
    [
        ["configs"],
        ["configs", "history", "c", "w"],
        ["configs", "pin", "c", "w", "1"],
        ["studies"],
        ["revalidate", "c", "w"],
    ],  # fmt: skip
)
def test_a_store_a_newer_version_wrote_is_refused_naming_both_schemas(store_url, args):
    written_by_a_newer_version(store_url)
    result = runner.invoke(app, [*args, "--db", store_url])
    assert result.exit_code == 2, result.output
    assert NEWER in said(result)
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_serve_refuses_a_store_a_newer_version_wrote(tmp_path):
    url = f"sqlite:///{tmp_path / 'autotuner.db'}"
    written_by_a_newer_version(url)
    result = serve(tmp_path, url)
    assert result.returncode == 2, result.stderr
    assert NEWER in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


def test_serve_refuses_a_file_that_is_not_a_database(tmp_path):
    (tmp_path / "autotuner.db").write_bytes(b"not a database, " * 512)
    result = serve(tmp_path, f"sqlite:///{tmp_path / 'autotuner.db'}")
    assert result.returncode == 2, result.stderr
    assert "cannot open the store" in result.stderr
    assert "file is not a database" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_current_store_is_read_without_its_schema_lock(tmp_path):
    # The lock file cannot be opened (a read-only mount says EROFS; a directory in its place says
    # EISDIR, as root too): a store at the latest schema needs no lock, and reads work.
    db = tmp_path / "autotuner.db"
    published(f"sqlite:///{db}")
    lock = tmp_path / "autotuner.db.schema-lock"
    lock.unlink()
    lock.mkdir()
    result = runner.invoke(app, ["configs", "--db", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    assert "v1" in result.output
    lock.rmdir()
    Store(f"sqlite:///{db}").dispose()
    assert not lock.exists()  # nothing to migrate: nothing written beside the store


def test_a_store_to_migrate_whose_lock_cannot_be_taken_is_said(tmp_path):
    db = tmp_path / "autotuner.db"
    engine = make_engine(f"sqlite:///{db}")
    cfg = alembic_config(engine)
    with engine.begin() as conn:  # a store of the version before this one
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0008")
    engine.dispose()
    (tmp_path / "autotuner.db.schema-lock").mkdir()
    result = runner.invoke(
        app, ["configs", "--db", f"sqlite:///{db}"], env={"COLUMNS": "400"}
    )  # the path whole
    assert result.exit_code == 2, result.output
    assert f"cannot take the schema lock {db}.schema-lock (Is a directory)" in said(result)
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_wal_store_in_a_read_only_directory_is_said(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    url = f"sqlite:///{folder / 'autotuner.db'}"
    published(url)
    if os.geteuid() == 0:  # root writes through a directory's permissions: a read-only mount, as it would be
        if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
            skip_or_fail("netns", "unshare -m (a mount namespace) is not permitted here")
        script = (f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && "
                  f"exec {sys.executable} -m autotuner configs --db {url}")  # fmt: skip
        proc = subprocess.run(
            ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120
        )
        code, output = proc.returncode, proc.stderr
    else:
        folder.chmod(0o555)
        try:
            result = runner.invoke(app, ["configs", "--db", url])
        finally:
            folder.chmod(0o755)
        code, output = result.exit_code, said(result)
    assert code == 2, output
    assert f"{folder} is not writable" in " ".join(output.split())


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["configs", "history", "c", "w", "--offset", HUGE], "--offset"),
        (["configs", "history", "c", "w", "--limit", HUGE], "--limit"),
        (["configs", "history", "c", "w", "--nodes", HUGE], "--nodes"),
        (["configs", "history", "c", "w", "--offset", "1000001"], "--offset"),
        (["configs", "history", "c", "w", "--limit", "1001"], "--limit"),
        (["configs", "pin", "c", "w", "1", "--nodes", HUGE], "--nodes"),
        (["configs", "unpin", "c", "w", "--nodes", HUGE], "--nodes"),
        (["configs", "rollback", "c", "w", "--nodes", HUGE], "--nodes"),
        (["configs", "show", "c", "w", "--nodes", HUGE], "--nodes"),
        (["configs", "validations", "c", "w", "--nodes", HUGE], "--nodes"),
        (["configs", "validations", "c", "w", "--nodes", "0"], "--nodes"),
        (["revalidate", "c", "w", "--nodes", HUGE], "--nodes"),
    ],
)
def test_numbers_past_the_rest_apis_bounds_are_a_usage_error(tmp_path, args, option):
    url = f"sqlite:///{tmp_path / 'autotuner.db'}"
    published(url)
    result = runner.invoke(app, [*args, "--db", url])
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"Invalid value for '{option}'" in said(result)


def test_the_largest_numbers_the_rest_api_takes_are_taken(tmp_path):
    url = f"sqlite:///{tmp_path / 'autotuner.db'}"
    published(url)
    args = ["configs", "history", "c", "w", "--limit", "1000", "--offset", "1000000", "--db", url]
    assert runner.invoke(app, args).exit_code == 0
    result = runner.invoke(app, ["configs", "history", "c", "w", "--nodes", "1000000", "--db", url])
    assert result.exit_code == 2
    assert "no config published for c/w at 1000000 nodes" in said(result)
