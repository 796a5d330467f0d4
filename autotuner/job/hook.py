"""The pre-job hook: `autotuner env` prints a job's tuned variables, `autotuner exec` runs a command with them.

It runs at the start of every training job, so it must never be the reason a job does not start:
fail-open. If the service is down, slow or answers with an error, it falls back to the last config it
cached for this (server, cluster, workload, nodes), or to nothing; it warns on stderr, exits 0, and
gives up within a hard time bound. Machine output (the export lines) goes alone to stdout. The cache
(in the user's home, maybe a hung NFS mount) is read within what is left of that bound and written
only once the job has its answer, within CACHE_S: it never holds a job either.

It trusts no answer: every one (from the service, the cache file or the store) goes through the gate
the service publishes with (autotuner.job.exports.check_exports): an answer that is not a config object,
or is labelled (AUTOTUNER_CONFIG) for another cluster or workload or not at all, is treated like an
error, and a variable that a config may not carry (LD_*, PYTHON*, BASH_ENV, PATH, *_PLUGIN, an unknown
name, a name with '=', a value with a newline or a NUL, ...) is dropped, with what a training script
takes together with it, named on stderr and in a comment line. Only a checked config is ever used,
printed or cached. Trouble is said by its cause: a refused token or request (with the service's
`detail`), a malformed answer, a service unreachable; names and a node count the service would refuse
are said before asking. Only the service's own 404 (NotPublished: its words for the key asked) means
nothing is published and forgets the cached config; a 404 from anything else at that address is trouble too.
`https://` servers are verified against the system's CAs, or the file AUTOTUNER_CA_FILE names.

It says what the job runs on (autotuner.job.fingerprint: driver, GPU model, NCCL and aws-ofi-nccl from
the files the job would load, node count; read in milliseconds, taken off the fetch's deadline) in
the X-Autotuner-Fingerprint header, so the service learns of jobs on another stack than the config
was validated on; and when they differ, a comment line and a warning say what (from the service,
its cache or the store alike).

Standard library only on the service path (no HTTP client, no SQLAlchemy, no torch): it is imported
and run on every job start.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import http.client
import json
import os
import re
import stat
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from autotuner.job.exports import FORMATS, checked_config, mismatch_note, render
from autotuner.job.fingerprint import HEADER, compare, encode, stack_changed, timed_detect
from autotuner.names import BadName, is_name
from autotuner.text import printable, shortened

DEFAULT_TIMEOUT_S = 1.5  # the whole fetch; the hook's bound (2 s) leaves room for start-up
MAX_TIMEOUT_S = 10.0  # a job's start waits at most this long on the service, whatever --timeout says


MAX_CACHE_BYTES = 64 << 10  # a config is a few hundred bytes
# The cache is a local file, read or written in milliseconds, but it lives in the user's home, which can
# be a hung NFS mount: a read gets at least this (else what is left of the fetch's deadline), a write
# (after the job's answer) at most this. Then the job goes on without it.
CACHE_S = 0.25
TMP_STALE_S = 60.0  # a temporary cache file older than this is a write that was cut short


def cache_dir() -> Path | None:
    """This user's cache directory, or None where there is no absolute one (no HOME and no passwd
    entry: `~` stays `~`, and a relative path would land in the job's working directory). A
    directory per user right under it (mode 0700): a shared AUTOTUNER_CACHE_DIR (mode 1777) then
    needs no trust between users."""
    base = os.environ.get("AUTOTUNER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nccl-autotuner"
    )
    return Path(base) / f"hook-{os.geteuid()}" if os.path.isabs(base) else None


def _cache_paths(server: str, cluster: str, workload: str, nodes: int | None) -> list[Path]:
    """Where the config is cached, keyed on the normalized server URL; then, if it differs, where an
    older hook cached it, keyed on the literal --server text: read when the first is missing, else the
    upgrade would orphan every node's cache and the next outage would start every job untuned."""
    where = cache_dir()
    if where is None:
        return []
    urls = dict.fromkeys((_normalized(server), server))  # in that order, once each
    return [where / f"{hashlib.sha256(f'{url}|{cluster}|{workload}|{nodes}'.encode()).hexdigest()[:32]}.json"
            for url in urls]  # fmt: skip


DEFAULT_PORTS = {"http": 80, "https": 443}


def _normalized(server: str) -> str:
    """The server URL as one service is written whatever way it is given: scheme and host lower-cased,
    the scheme's default port and trailing slashes dropped (`HTTP://Host:80/` is `http://host`). Names
    are not resolved (localhost stays apart from 127.0.0.1). A URL the hook would refuse is kept as given."""
    try:
        url = urllib.parse.urlsplit(server)
        port = url.port
    except ValueError:
        return server
    scheme, host = url.scheme.lower(), url.hostname
    if scheme not in DEFAULT_PORTS or not host or url.username is not None or url.password is not None:
        return server
    netloc = f"[{host}]" if ":" in host else host  # an IPv6 address keeps its brackets
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    return urllib.parse.urlunsplit((scheme, netloc, url.path.rstrip("/"), url.query, url.fragment))


def _private_dir(path: Path) -> None:
    """ValueError unless `path` is a directory of this user's that no one else may write (not a link):
    in a shared cache directory another user could make hook-<uid> first, then swap the files in it."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise ValueError(f"{path} is not a directory of this user's that only it may write")


def _read_first(caches: list[Path]) -> tuple[Path, Any]:
    """The first of `caches` that exists, and its JSON (FileNotFoundError: none does)."""
    for cache in caches[:-1]:
        try:
            return cache, _read_cache(cache)
        except FileNotFoundError:
            continue
    return caches[-1], _read_cache(caches[-1])


def _read_cache(cache: Path) -> Any:
    """The cache file's JSON. Only a regular file of this user's, in a directory of its own, opened
    without following a link or blocking (a FIFO there would hang the job, /dev/zero fill its memory),
    at most MAX_CACHE_BYTES."""
    _private_dir(cache.parent)
    fd = os.open(cache, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > MAX_CACHE_BYTES:
            raise ValueError(
                f"{cache} is not a regular file of this user's under {MAX_CACHE_BYTES >> 10} KiB"
            )
        return json.loads(os.read(fd, MAX_CACHE_BYTES + 1))
    finally:
        os.close(fd)


def _write_cache(cache: Path, config: dict[str, Any]) -> None:
    """Written whole under a name nobody can guess or plant a link at (O_EXCL), then renamed over."""
    text = json.dumps({k: v for k, v in config.items() if k not in PER_JOB}).encode()
    cache.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _private_dir(cache.parent)
    _sweep_tmp(cache)
    tmp = cache.with_name(f".{cache.stem}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text)
        os.replace(tmp, cache)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _sweep_tmp(cache: Path) -> None:
    """Remove this key's temporary files left by writes cut short: a write still going when its job's
    command was exec'd (the write is bounded, see settle_cache) left one on every job on a slow home."""
    now = time.time()
    for tmp in cache.parent.glob(f".{glob.escape(cache.stem)}.*.tmp"):
        try:
            st = os.lstat(tmp)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and now - st.st_mtime > TMP_STALE_S:
                tmp.unlink()
        except OSError:
            continue  # another job's write took it first, or it is not ours to remove


def _warn(message: str) -> None:
    _stderr(f"autotuner: {message}")


def _stderr(line: str) -> None:
    """Best effort, and never on stdout: with stderr closed (2>&-) Python's print(file=None) writes to
    stdout, which the job evals; with its reader gone, BrokenPipeError must not fail the job."""
    if sys.stderr is None:
        return
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _stdout(text: str) -> None:
    """What the job reads (export lines, JSON); with stdout closed (>&-) there is no one to tell."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def fetch_from_server(
    server: str,
    token: str | None,
    cluster: str,
    workload: str,
    nodes: int | None,
    timeout_s: float,
    ca_file: str | None = None,
    fingerprint: str = "",
) -> Any:
    """GET /v1/configs/{cluster}/{workload} within a hard deadline: the decoded answer, unchecked,
    or NotPublished (the service's own 404; any other 404 raises NotTheService). `fingerprint`: the
    job's, as the header's value ("": not sent)."""
    _usable(server, token)
    path = f"/v1/configs/{urllib.parse.quote(cluster, safe='')}/{urllib.parse.quote(workload, safe='')}"
    query = f"?nodes={nodes}" if nodes is not None else ""
    url = server.rstrip("/") + path + query
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    token = (token or "").strip()  # a token read from a CRLF file ends in \r, which no header carries
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if fingerprint:
        request.add_header(HEADER, fingerprint)
    asked = f"no config published for {cluster}/{workload}"
    return _within(timeout_s, lambda: _read(request, ca_file, timeout_s, asked))


class LocalFault(Exception):
    """The hook's own command line cannot make the request (nothing was asked): said as such, not as the
    service's fault, and never with the token or a password in the words."""


def _usable(server: str, token: str | None) -> None:
    try:
        url = urllib.parse.urlsplit(server)
        url.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise LocalFault(
            "the server URL cannot be read (its host or port): check --server or AUTOTUNER_SERVER"
        ) from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise LocalFault("the server URL is not http(s)://host[:port]: check --server or AUTOTUNER_SERVER")
    if url.username is not None or url.password is not None:
        raise LocalFault("the server URL carries credentials (user@ or user:password@): give the read token with "
                         "--token or AUTOTUNER_TOKEN")  # fmt: skip
    if any(c.isspace() or not c.isprintable() for c in server):
        raise LocalFault(
            "the server URL holds a space or a control character: check --server or AUTOTUNER_SERVER"
        )
    if not _sendable((token or "").strip()):
        raise LocalFault("the token cannot be sent in a header (it holds a line break, NUL or a character outside "
                         "Latin-1; not shown): check --token or AUTOTUNER_TOKEN")  # fmt: skip


def _sendable(token: str) -> bool:
    try:
        token.encode("latin-1")  # what http.client sends a header as
    except UnicodeEncodeError:
        return False
    return not any(c in token for c in "\r\n\0")


def _within(timeout_s: float, call: Callable[[], Any]) -> Any:
    """`call()`'s answer, or TimeoutError once `timeout_s` has passed. urllib's timeout bounds each
    socket operation, not the request: a server that trickles bytes could hold a job forever. The
    call runs in a daemon thread that we stop waiting for."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["answer"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {round(timeout_s, 2):g} s")  # 1.5 s, not 1.49935 s
    if "error" in box:
        raise box["error"]
    return box["answer"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A config fetch never needs a redirect; following one could leave https or the server."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _opener(url: str, ca_file: str | None) -> urllib.request.OpenerDirector:
    handlers: list[Any] = [_NoRedirect]
    if url.startswith("https:"):
        import ssl

        try:
            context = ssl.create_default_context(cafile=ca_file)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: no file, a directory, no PEM in it
            if not ca_file:
                raise
            # the job's own setting, not the service: said as such (it read "config service unreachable
            # (FileNotFoundError: [Errno 2] No such file or directory)", naming no file)
            raise LocalFault(f"the CA file {ca_file!r} cannot be used ({getattr(exc, 'strerror', None) or exc}): "
                             "check --ca-file or AUTOTUNER_CA_FILE") from None  # fmt: skip
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


MAX_ANSWER_BYTES = 1 << 20  # a config is a few hundred bytes


class Refused(Exception):
    """The service answered with an error status (not 404): its code and what it said (`detail`)."""

    def __init__(self, code: int, said: str) -> None:
        super().__init__(f"HTTP {code}: {said}")
        self.code, self.said = code, said


class NotPublished:
    """The service's own 404 for the key asked: nothing is published for it (the cached config, if any,
    was withdrawn). `said`: its `detail`, printable and bounded (a hint at a typo'd name, from a service
    that gives one)."""

    def __init__(self, said: str) -> None:
        self.said = said


class NotTheService(Exception):
    """A 404 that is not the service's "nothing published": another web app or an ingress's default
    backend at the server's address, a load balancer mid-deploy, a wrong path prefix. Trouble, like an
    outage (the cache is served and kept), said as what answered."""


class Malformed(ValueError):
    """A 200 whose body is no JSON document (not UTF-8, cut short, nested past the parser's depth)."""


def _read(request: urllib.request.Request, ca_file: str | None, timeout_s: float, asked: str) -> Any:
    """The decoded answer; for a 404, NotPublished where it is the service's own (`asked`: the words its
    detail starts with), else NotTheService."""
    try:
        with _opener(request.full_url, ca_file).open(request, timeout=timeout_s) as response:
            body = response.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            try:
                return _not_published(exc, asked)
            finally:
                exc.close()
        said = _what_it_said(exc)
        exc.close()
        raise Refused(exc.code, said) from None
    if len(body) > MAX_ANSWER_BYTES:
        raise Malformed(f"over {MAX_ANSWER_BYTES >> 20} MiB")
    try:
        return json.loads(body)
    except RecursionError:  # "[[[[...": no config nests past a few levels
        raise Malformed("not a config: JSON nested deeper than the parser follows") from None
    except ValueError as exc:  # not JSON, not UTF-8, an integer of 900,000 digits
        raise Malformed(f"not JSON: {str(exc)[:120]}") from None


ERROR_BODY_BYTES = 64 << 10  # what of an error answer is read: its detail is a sentence or a few
MAX_DETAIL_CHARS = 600  # what of a 404's detail is said: the service's hint names 5 cluster/workload pairs
EXCERPT_CHARS = 160  # what of an answer not the service's is said: enough to tell which app it was


def _not_published(exc: urllib.error.HTTPError, asked: str) -> NotPublished:
    """A 404 is the service's "nothing published" only in its exact shape: JSON whose `detail` is `asked`
    ("no config published for c/w"), then the service's hint in parentheses (an older service's: no
    hint). No other server says those words for this key in FastAPI's shape, and a header a proxy may drop
    would leave a withdrawn config served from the cache for ever. Anything else raises NotTheService: a
    misrouted 404 would have dropped the cache just before the outage it is kept for."""
    kind = exc.headers.get("Content-Type", "")
    raw = exc.read(ERROR_BODY_BYTES)  # within the fetch's deadline; a 1 MB error page is not read whole
    detail = _detail(raw) if kind.split(";")[0].strip().lower() == "application/json" else None
    if isinstance(detail, str) and (detail == asked or detail.startswith(asked + " (")):
        return NotPublished(shortened(printable(detail), MAX_DETAIL_CHARS))
    url = printable(urllib.parse.urlsplit(exc.url or "")._replace(query="").geturl())
    raise NotTheService(f"HTTP 404 from {shortened(url, EXCERPT_CHARS)}, not the config service's answer "
                        f"({shortened(printable(kind), 60) or 'no content type'}: {_excerpt(raw)})")  # fmt: skip


def _excerpt(raw: bytes) -> str:
    """The start of a body someone else wrote, as one short line: its whitespace runs as one space,
    control and format characters (escapes, bidi overrides) left out, the rest printable ASCII."""
    text = raw[: EXCERPT_CHARS * 4].decode("utf-8", "replace")
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return f'"{shortened(printable(text), EXCERPT_CHARS)}"' if text else "an empty body"


def _what_it_said(exc: urllib.error.HTTPError) -> str:
    """What an error answer says: its JSON `detail` (FastAPI's: a text, or a list of {loc, msg}), where
    a redirect points, else the status's reason. Read within the fetch's deadline, at most 64 KiB."""
    if 300 <= exc.code < 400:
        return f"a redirect to {exc.headers.get('Location', 'nowhere said')}, which the hook never follows"
    try:
        body = exc.read(ERROR_BODY_BYTES)
    except Exception:  # cut off on the way: the status says it
        body = b""
    detail = _detail(body)
    if isinstance(detail, list):
        detail = "; ".join(_one_error(item) for item in detail[:5])
    return printable(str(detail if detail else exc.reason))[:300]


def _detail(body: bytes) -> Any:
    """An error answer's JSON `detail` (FastAPI's), or None: no body, not JSON, not an object."""
    try:
        return json.loads(body).get("detail")
    except Exception:  # cut at ERROR_BODY_BYTES, a page of HTML, a list
        return None


def _one_error(item: object) -> str:
    """One of FastAPI's {loc, msg} errors as "field: msg"; whatever else an answer holds, as text."""
    if not isinstance(item, dict):
        return str(item)
    loc = item.get("loc")
    where = ".".join(str(part) for part in loc[1:]) if isinstance(loc, list) else ""
    return f"{where}: {item.get('msg')}".lstrip(": ")


def fetch_from_db(url: str, cluster: str, workload: str, nodes: int | None) -> dict[str, Any] | None:
    from autotuner.store import Store
    from autotuner.store.db import missing_sqlite_file

    missing = missing_sqlite_file(url)
    if missing:
        raise FileNotFoundError(f"no store at {missing}")
    store = Store(url, migrate_schema=False)
    try:
        row = store.served_config(cluster, workload, nodes)
        return store.public_config(row) if row is not None else None
    finally:
        store.dispose()


def _trouble(exc: Exception, elapsed: float) -> str:
    """What went wrong, in words that point at the fix: a missing or unknown token (401), a request the
    service refused (a 4xx, with what it said), an answer that is no JSON, and a service that could not
    be reached are different problems."""
    said = _BEARER.sub(
        "Bearer <the token, not shown>", f"{type(exc).__name__}: {exc}"
    )  # http.client quotes it
    if isinstance(exc, Refused):
        if exc.code == 401:
            return "the config service refused the token (HTTP 401: set --token or AUTOTUNER_TOKEN to a read token)"
        what = "refused the request" if exc.code < 500 else "failed"
        return f"config service {what} (HTTP {exc.code}: {exc.said})"
    if isinstance(exc, Malformed):
        return f"the config service's answer is malformed ({printable(str(exc))})"
    if isinstance(exc, NotTheService):
        return f"{exc}: check --server or AUTOTUNER_SERVER"
    if isinstance(exc, LocalFault):
        return f"no request was made ({exc})"
    # http.client's own errors (LineTooLong, over 100 headers), but a dropped connection (an OSError)
    if isinstance(exc, http.client.HTTPException) and not isinstance(exc, OSError):
        return f"the config service's answer is malformed ({said})"
    return f"config service unreachable ({said}, {elapsed:.1f} s)"


_BEARER = re.compile(r"Bearer [^'\"\s]*(\\r|\\n|\r|\n)?")


Dropped = dict[str, str]  # variable -> why it was not exported ("": the whole answer was not used)
PER_JOB = ("fingerprint_match", "fingerprint_diff")  # said to one job: never cached for the next


DETECT_S = 0.5  # what reading the node's stack may take of the hook's bound (milliseconds, as a rule)


def _bounded_detect(nodes: int | None) -> tuple[dict[str, str], float]:
    """The job's fingerprint and the seconds spent; nothing after DETECT_S (a stat on a dead NFS mount
    in LD_LIBRARY_PATH hangs: the job must start regardless)."""
    started = time.monotonic()
    try:
        found, _ = _within(DETECT_S, lambda: timed_detect(nodes=nodes))
    except Exception as exc:  # said, not reported: the config is still fetched
        _warn(printable(f"the node's stack could not be read ({type(exc).__name__}: {exc}): not reported"))
        found = {}
    return found, time.monotonic() - started


def resolve(args: argparse.Namespace) -> tuple[dict[str, Any] | None, Dropped]:
    """The config for this job, checked, fail-open, and what was dropped from it. Never raises for
    service trouble; a malformed answer counts as trouble (the cache, else nothing). Leaves the
    job's fingerprint in `args.job_fingerprint`, and what the cache is to learn (what, a call) in
    `args.cache_update`: `settle_cache(args)` does it once the job has its config (output printed,
    just before the command runs), within CACHE_S."""
    args.deadline = time.monotonic() + args.timeout  # the fetch's; a cache read gets what is left
    args.cache_update = None
    args.job_fingerprint, spent = _bounded_detect(args.nodes)
    if not args.server:
        if not args.db:  # never a store by default: it could be anywhere, and nothing bounds its time
            _warn(
                "no config service set (--server or AUTOTUNER_SERVER): starting with the job's own environment"
            )
            return None, {}
        answer = fetch_from_db(args.db, args.cluster, args.workload, args.nodes)
        if answer is None:  # said, as the service's 404 is
            _warn(f"no config published for {args.cluster}/{args.workload} in the store: starting with the job's "
                  "own environment")  # fmt: skip
        return _checked(answer, "the store", args)
    caches = _cache_paths(args.server, args.cluster, args.workload, args.nodes)
    cache = caches[0] if caches else None
    started = time.monotonic()
    try:
        answer = fetch_from_server(args.server, args.token, args.cluster, args.workload, args.nodes,
                                   max(0.05, args.timeout - spent), args.ca_file, encode(args.job_fingerprint))  # fmt: skip
    except TimeoutError:  # the fetch had what detection left of --timeout: the job waited all of it
        trouble = _trouble(
            TimeoutError(f"no answer within {round(args.timeout, 2):g} s"), time.monotonic() - started
        )
        return _from_cache(caches, trouble, args), {}
    except Exception as exc:  # down, slow, 5xx, a refused token, garbage: the job starts anyway
        return _from_cache(caches, _trouble(exc, time.monotonic() - started), args), {}
    if isinstance(answer, NotPublished):
        _warn(f"{answer.said}: starting with the job's own environment")
        if caches:

            def forget() -> None:  # under the old key too: the next outage would serve it from there
                for path in caches:
                    path.unlink(missing_ok=True)

            args.cache_update = ("remove the withdrawn config from the cache", forget)
        return None, {}
    config, dropped = checked_config(answer)
    if config is None:  # a 200 that is not a config: as if the service had failed
        reason = f"the config service's answer is malformed ({dropped['']})"
        return _from_cache(caches, reason, args), {"": reason}
    other = _anothers(config, args, dropped)
    if other:  # a proxy's, a misrouted or a stale answer: never exported, never cached
        reason = f"the config service answered with {other} (refused)"
        return _from_cache(caches, reason, args), {"": reason}
    _warn_dropped(dropped, "the service's answer")
    if cache is not None:
        args.cache_update = ("cache the config", lambda: _write_cache(cache, config))
    return config, dropped


def settle_cache(args: argparse.Namespace) -> None:
    """What resolve() left for the cache (the config to keep, a withdrawn one to forget), done once the
    job has its answer and best effort: within CACHE_S, in a thread the job does not wait for after
    that (a hung NFS home must not hold the job: its answer is printed, or its command run, anyway)."""
    pending = getattr(args, "cache_update", None)
    args.cache_update = None
    if pending is None:
        return
    what, update = pending
    try:
        _within(CACHE_S, update)
    except TimeoutError:
        _warn(f"could not {what} (the cache directory did not answer within {CACHE_S:g} s)")
    except (OSError, ValueError, RecursionError) as exc:
        _warn(printable(f"could not {what} ({type(exc).__name__}: {exc})"))


def _checked(answer: Any, source: str, args: argparse.Namespace) -> tuple[dict[str, Any] | None, Dropped]:
    if answer is None:
        return None, {}
    config, dropped = checked_config(answer)
    if config is None:
        _warn(f"{source} gave no usable config ({dropped['']}): starting the job with its own environment")
        return None, {}
    other = _anothers(config, args, dropped)
    if other:
        _warn(f"{source} gave {other} (refused): starting the job with its own environment")
        return None, {}
    _warn_dropped(dropped, source)
    return config, dropped


def _anothers(config: dict[str, Any], args: argparse.Namespace, dropped: Dropped) -> str | None:
    """None if a checked config is labelled (AUTOTUNER_CONFIG) as the cluster and workload asked for,
    else what it is instead, in words naming both (a label the gate refused, and why)."""
    label = (config.get("cluster"), config.get("workload"))
    if label == (args.cluster, args.workload):
        return None
    asked = f"{args.cluster}/{args.workload}"
    if label == (None, None) and "AUTOTUNER_CONFIG" in dropped:
        return printable(f"a config whose AUTOTUNER_CONFIG label was refused ({dropped['AUTOTUNER_CONFIG']}), "
                         f"not one labelled {asked}")  # fmt: skip
    if label == (None, None):
        return printable(f"a config without its AUTOTUNER_CONFIG label, not one labelled {asked}")
    return printable(f"the config of {label[0]}/{label[1]}, not of {asked}")


def _from_cache(caches: list[Path], trouble: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """The cached config, if there is one, it passes the gate whole (the hook only ever writes
    checked configs: anything else in that file was put there by someone else) and it is the config
    of the cluster and workload asked for (a file moved to another key would serve another's)."""
    trouble = printable(trouble)
    try:
        if not caches:
            raise FileNotFoundError("no cache directory")
        # what the fetch left of its deadline (a refusal, most of it), at least CACHE_S (a timeout, none)
        wait = max(CACHE_S, args.deadline - time.monotonic())
        cache, cached = _within(wait, lambda: _read_first(caches))
    except TimeoutError:  # a hung NFS home: the job starts without it
        _warn(f"{trouble} and the cache directory did not answer within {round(wait, 2):g} s: starting the "
              "job with its own environment")  # fmt: skip
        return None
    except FileNotFoundError:
        _warn(f"{trouble} and no cached config: starting the job with its own environment")
        return None
    except (OSError, ValueError, RecursionError) as exc:
        _warn(printable(f"{trouble} and the cached config is not usable ({exc}): "
                         "starting the job with its own environment"))  # fmt: skip
        return None
    config, dropped = checked_config(cached)
    if config is None or dropped:
        _warn(f"{trouble} and the cached config {cache} does not pass the checks (ignored): "
              "starting the job with its own environment")  # fmt: skip
        return None
    other = _anothers(config, args, dropped)
    if other:
        _warn(printable(f"{trouble} and the cached config {cache} is another's ({other}; ignored): "
                        "starting the job with its own environment"))  # fmt: skip
        return None
    _warn(f"{trouble}: using the cached config {config['exports'].get('AUTOTUNER_CONFIG', '')}")
    return config


def _warn_dropped(dropped: Dropped, source: str) -> None:
    if dropped:
        what = "; ".join(f"{name} ({why})" for name, why in dropped.items())
        _warn(printable(f"not exported from {source}: {what}"))


def fingerprint_note(config: dict[str, Any] | None, job: dict[str, str]) -> tuple[str, str] | None:
    """What differs between the stack the config was validated on and this job's, as one line, and the
    warning that also says what the service does with it; None when nothing known differs. Computed here for every source alike (service, cache, store): what
    a config says it was validated on is only compared and printed, never acted on."""
    if config is None or not job:
        return None
    validated_on = config.get("validated_on")
    validated_on = validated_on if isinstance(validated_on, dict) else {}
    match, diff = compare(validated_on, job)
    if match is not False:
        return None
    label = config["exports"].get("AUTOTUNER_CONFIG", "the config")
    note = mismatch_note(label, validated_on, diff)
    return note, f"{note} ({_what_follows(diff)})"


def _what_follows(diff: dict[str, list[str]]) -> str:
    """What the service does with the difference, for the warning: another stack asks for a
    re-validation there; a node count alone is reported, never a trigger (a re-validation measures the
    config's own node count: it said "`autotuner revalidate` checks it holds here" all the same)."""
    if stack_changed(diff):
        return "the service is told; `autotuner revalidate` checks it holds here"
    return "reported only: a study at this node count tunes for it"


def _comments(dropped: Dropped) -> str:
    """Comment lines (a shell and a TaskProlog skip them) saying what was not used and why."""
    return "".join(
        f"# nccl-autotuner: {'not exported: ' + name if name else 'the answer was not used'}: {printable(why)}\n"
        for name, why in dropped.items()
    )


class UsageError(Exception):
    """A command line the hook cannot read: said, and the job starts with its own environment."""


class _Parser(argparse.ArgumentParser):
    # argparse exits 2 on a bad argument; in a job's prolog or wrapper that would fail the job (or
    # never run its command), so the hook says what is wrong and fails open instead (--help still exits 0)
    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: ") and not message.split(": ", 1)[1].startswith("-"):
            message += " (names are options: --cluster C --workload W)"  # as `configs show C W` takes them
        raise UsageError(f"{self.prog}: {message}")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # `--timeout -inf` read as an option ("expected one argument": no config) where `--timeout -1`
        # is a wait out of bounds (the default, the config kept): both are the latter
        return super().parse_known_args(None if args is None else _timeout_joined(list(args)), namespace)


def _timeout_joined(args: list[str]) -> list[str]:
    joined: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--timeout":
            value = next(rest, None)
            if value is None:
                joined.append(arg)
            elif value[:1] == "-" and value != "--":
                joined.append(f"--timeout={value}")
            else:
                joined += [arg, value]
        else:
            joined.append(arg)
    return joined


EXEC_USAGE = "autotuner exec [options] -- CMD [ARGS...]"


def parser(prog: str, usage: str | None = None) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, usage=usage, description=__doc__.splitlines()[0])
    p.add_argument(
        "--server", default=os.environ.get("AUTOTUNER_SERVER"), help="service URL (AUTOTUNER_SERVER)"
    )
    p.add_argument("--token", default=os.environ.get("AUTOTUNER_TOKEN"), help="read token (AUTOTUNER_TOKEN)")
    p.add_argument("--db", default=None, help="read the store directly instead of a service (admin use)")
    p.add_argument("--cluster", default=os.environ.get("AUTOTUNER_CLUSTER"),
                   help="the cluster the config was tuned for (AUTOTUNER_CLUSTER)")  # fmt: skip
    p.add_argument("--workload", default=os.environ.get("AUTOTUNER_WORKLOAD"),
                   help="the job's workload name, as tuned (AUTOTUNER_WORKLOAD)")  # fmt: skip
    p.add_argument("--nodes", type=int, default=_int_env("AUTOTUNER_NODES", "SLURM_JOB_NUM_NODES"),
                   help="node count of this job: nearest tuned count is served")  # fmt: skip
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds to wait for the service (default {DEFAULT_TIMEOUT_S:g}, at most {MAX_TIMEOUT_S:g})")  # fmt: skip
    p.add_argument("--ca-file", default=os.environ.get("AUTOTUNER_CA_FILE") or None,
                   help="CA bundle that signs an https:// server's certificate (AUTOTUNER_CA_FILE)")  # fmt: skip
    return p


MAX_NODES = 1_000_000  # the REST routes' bound (api/fastpath.py), checked here before asking


def _int_env(*names: str) -> int | None:
    """The first of `names` that holds a node count (ASCII digits, at most 7: "²".isdigit() is true and
    int() refuses it; 5,000 digits exceed int()'s limit; 1 to MAX_NODES); others are passed over,
    never raised on."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isascii() and value.isdigit() and len(value) <= 7 and 1 <= int(value) <= MAX_NODES:
            return int(value)
    return None


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What the service would refuse (a 422), refused here in words naming the setting."""
    if not args.cluster or not args.workload:
        p.error("--cluster and --workload are required (or AUTOTUNER_CLUSTER / AUTOTUNER_WORKLOAD)")
    for kind, value in (("cluster", args.cluster), ("workload", args.workload)):
        if not is_name(value):
            p.error(f"{BadName(kind, value)} (--{kind} or AUTOTUNER_{kind.upper()})")
    if args.nodes is not None and not 1 <= args.nodes <= MAX_NODES:
        p.error(f"--nodes {args.nodes} is not a node count (1 to {MAX_NODES:,})")
    if not 0 < args.timeout <= MAX_TIMEOUT_S:  # NaN too: the job must neither wait on it nor lose its config
        _warn(f"--timeout {args.timeout:g} is not a wait of over 0 and at most {MAX_TIMEOUT_S:g} s: "
              f"waiting {DEFAULT_TIMEOUT_S:g} s")  # fmt: skip
        args.timeout = DEFAULT_TIMEOUT_S


def env_main(argv: list[str]) -> int:
    p = parser("autotuner env")
    p.add_argument("--format", choices=[f for f in FORMATS if f != "env"] + ["env"], default="sh",
                   help="sh or env: shell export lines (default sh); slurm: a TaskProlog's, unquoted; json: the config")  # fmt: skip
    try:
        args = p.parse_args(argv)
        _check(p, args)
    except UsageError as exc:
        _warn(printable(f"{exc}: no tuned config, the job starts with its own environment"))
        json_asked = "--format=json" in argv or ["--format", "json"] in (
            argv[i : i + 2] for i in range(len(argv))
        )
        # the cause on stdout too (one printable line, a shell comment): a prolog's log may keep only that
        _stdout("null\n" if json_asked else f"# nccl-autotuner: no config ({printable(str(exc))[:300]})\n")
        return 0
    try:
        config, dropped = resolve(args)
    except Exception as exc:  # a broken local DB is an admin error: say so, still exit 0 for the job
        _warn(printable(f"could not read the config: {type(exc).__name__}: {exc}"))
        config, dropped = None, {}
    try:
        text = render(config, args.format) if config is not None else ""
    except Exception as exc:  # cannot happen to a checked config; the job starts regardless
        _warn(printable(f"could not render the config: {type(exc).__name__}: {exc}"))
        config, text = None, "# nccl-autotuner: no config (it could not be rendered)\n"
    note, warning = fingerprint_note(config, getattr(args, "job_fingerprint", {})) or ("", "")
    if note:
        _warn(warning)
    if args.format == "json":
        _stdout((text if config is not None else "null") + "\n")
    else:
        _stdout(text + _comments(dropped) + (f"# nccl-autotuner: {note}\n" if note else ""))
    settle_cache(args)  # after the answer: the job has it whatever the cache does
    return 0


def exec_main(argv: list[str]) -> int:
    """Run CMD with the tuned env layered over ours. Only the hook may fail open; CMD's exit is its own."""
    if "--" not in argv:
        if "-h" in argv or "--help" in argv:
            parser("autotuner exec", EXEC_USAGE).print_help()
            return 0
        _stderr(f"usage: {EXEC_USAGE}")
        if any(not a.startswith("-") for a in argv):  # a command given without `--`: not guessed at
            _stderr("autotuner exec: the command goes after `--`; nothing was run")
        return 2
    split = argv.index("--")
    own, command = argv[:split], argv[split + 1 :]
    if not command:
        _stderr("autotuner exec: no command after --")
        return 2
    p = parser("autotuner exec")
    env = dict(os.environ)
    args = argparse.Namespace()
    try:
        args = p.parse_args(own)
        _check(p, args)
        config, _ = resolve(args)
        if config is not None:
            env.update(config["exports"])  # checked: names and string values a config may set
        noted = fingerprint_note(config, getattr(args, "job_fingerprint", {}))
        if noted:
            _warn(noted[1])
    except UsageError as exc:
        _warn(printable(f"{exc}: no tuned config, running the command with its own environment"))
    except SystemExit:  # --help (argparse exits 0 after printing it): the command still runs
        _warn("no tuned config (--help given), running the command with its own environment")
    except Exception as exc:
        _warn(printable(f"could not read the config: {type(exc).__name__}: {exc}"))
    settle_cache(args)  # the last thing before the command (nothing runs after exec), within CACHE_S
    try:
        os.execvpe(command[0], command, env)
    except (OSError, ValueError) as exc:  # ValueError: an empty command name ("$CMD" unset)
        # as a shell answers: 126 found but not runnable, 127 not found (or no name at all)
        found = isinstance(exc, (PermissionError, IsADirectoryError))
        _stderr(
            printable(f"autotuner exec: cannot run {command[0]!r}: {getattr(exc, 'strerror', None) or exc}")
        )
        return 126 if found else 127


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "env":
        return env_main(argv[1:])
    if argv and argv[0] == "exec":
        return exec_main(argv[1:])
    print("usage: autotuner {env,exec} ...", file=sys.stderr)
    return 2
