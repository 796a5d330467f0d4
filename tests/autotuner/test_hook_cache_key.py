"""The hook's cache is keyed on the service, not on how its URL is spelled: `http://127.0.0.1:18431`
cached the config, and `http://127.0.0.1:18431/` or `HTTP://127.0.0.1:18431` (the same service) found
no cache while it was down. A cache written by an older hook under the literal --server text is still
read (else the upgrade orphaned every node's cache: the next outage started every job untuned), and a
config the service withdraws is forgotten under both keys."""

from __future__ import annotations

import hashlib
import os

import pytest

from autotuner.job import hook as hook_module
from autotuner.job.exports import checked_config
from tests.autotuner.test_hook_hostile import GOOD, cached_files, hook, serve, served_then_down  # noqa: F401


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        ("http://127.0.0.1:18431", "http://127.0.0.1:18431"),
        ("http://127.0.0.1:18431/", "http://127.0.0.1:18431"),
        ("HTTP://127.0.0.1:18431//", "http://127.0.0.1:18431"),
        ("http://Tuner.Example:80/", "http://tuner.example"),
        ("HTTPS://tuner.example:443", "https://tuner.example"),
        ("https://tuner.example:80", "https://tuner.example:80"),  # not https's default: kept
        ("http://[::1]:8000/", "http://[::1]:8000"),
        ("http://tuner/Prefix/", "http://tuner/Prefix"),  # a path's case is the server's to read
        ("http://localhost:8000", "http://localhost:8000"),  # names are not resolved
        ("http://h:port", "http://h:port"),  # a URL the hook refuses: as given
    ],
)
def test_the_server_url_is_keyed_as_one_service(given, normalized):
    assert hook_module._normalized(given) == normalized


def test_the_same_service_spelled_otherwise_serves_the_cached_config(tmp_path, serve):  # noqa: F811
    url, _ = served_then_down(tmp_path, serve)
    for spelled in (url + "/", "HTTP" + url.removeprefix("http")):
        proc = hook(tmp_path, spelled)
        assert proc.returncode == 0, proc.stderr
        assert "export NCCL_NSOCKS_PERTHREAD=4" in proc.stdout, proc.stderr
        assert "using the cached config c/w/1n/v3" in proc.stderr


def old_key_cache(tmp_path, monkeypatch, url: str):
    """A config cached as the hook before this one did: keyed on the literal --server text."""
    monkeypatch.setenv("AUTOTUNER_CACHE_DIR", str(tmp_path / "cache"))
    old = hook_module.cache_dir() / f"{hashlib.sha256(f'{url}|c|w|None'.encode()).hexdigest()[:32]}.json"
    config, _ = checked_config({"exports": GOOD})
    hook_module._write_cache(old, config)
    assert old != hook_module._cache_paths(url, "c", "w", None)[0]
    return old


def test_a_cache_written_under_the_old_key_is_still_served(tmp_path, monkeypatch, serve):  # noqa: F811
    url, cache = served_then_down(tmp_path, serve)
    cache.unlink()
    old_key_cache(tmp_path, monkeypatch, url + "/")
    proc = hook(tmp_path, url + "/")
    assert proc.returncode == 0, proc.stderr
    assert "export NCCL_NSOCKS_PERTHREAD=4" in proc.stdout, proc.stderr


def test_a_withdrawn_config_is_forgotten_under_the_old_key_too(tmp_path, monkeypatch, serve):  # noqa: F811
    server = serve({"detail": "no config published for c/w"}, status=404)
    old = old_key_cache(tmp_path, monkeypatch, server.url + "/")
    proc = hook(tmp_path, server.url + "/")
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert not os.path.exists(old)
    assert cached_files(tmp_path) == []
