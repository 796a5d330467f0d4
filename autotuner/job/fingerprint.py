"""What a config was validated on, what a job runs on, and what differs between the two.

One comparable shape on both sides, a few keys of plain strings:

    gpu           the GPU model ("NVIDIA H100 80GB HBM3")
    driver        the NVIDIA kernel driver ("550.54.15")
    nccl          the NCCL library ("2.21.5")
    aws_ofi_nccl  the aws-ofi-nccl plugin ("1.9.1-aws")
    nodes         the node count

The job side (`detect`, run by the pre-job hook at every job start) learns them cheaply and without
torch: the driver and GPU model from /proc/driver/nvidia (`nvidia-smi`, bounded, only where /proc
does not say), NCCL and aws-ofi-nccl from the library files the job's environment would load
(LD_PRELOAD, LD_LIBRARY_PATH, the pip wheel beside this Python, the system's library directories),
the node count from the hook's own `--nodes`. The measuring side is the trial's result
(`comparable` maps autotuner.tuning.ingest.fingerprint's record onto the same keys). A key one side
does not know is not compared; nothing compared at all is "unknown".

Standard library only: the pre-job hook imports this on every job start.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from autotuner.text import printable

KEYS = ("gpu", "driver", "nccl", "aws_ofi_nccl", "nodes")
# A change of these makes a config stale: the stack it was measured on is not the one jobs run on.
# A different node count is reported too, but re-validating the same config would not answer it
# (the job is served the nearest tuned count; tune that count).
STACK = ("gpu", "driver", "nccl", "aws_ofi_nccl")
LABELS = {"gpu": "GPU", "driver": "driver", "nccl": "NCCL", "aws_ofi_nccl": "aws-ofi-nccl", "nodes": "nodes"}
HEADER = "X-Autotuner-Fingerprint"  # how the hook sends it: `key=value&...`, URL-encoded
OVERRIDE = (
    "AUTOTUNER_FINGERPRINT"  # set by a site: `driver=570.86.15&nccl=2.23.4` overrides, `off` sends none
)
MAX_HEADER = 1024
# Patterns compiled at first use (re's cache), not at import: the hook imports this at every job start.
_VALUE = r"[ -~]{1,128}"  # printable ASCII, one line
_VERSION = r"\d+(?:\.\d+)*"

PROC_NVIDIA = "/proc/driver/nvidia"
SYSTEM_LIB_DIRS = ("/usr/local/nccl/lib", "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu",
                   "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/local/lib", "/usr/lib")  # fmt: skip
OFI_DIRS = ("/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "/opt/amazon/ofi-nccl/lib/aarch64-linux-gnu",
            "/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib64", "/opt/aws-ofi-nccl/lib")  # fmt: skip
OFI_SCAN_LIMIT = 64 << 20  # a plugin is a few MB; never read more than this of one file
NVIDIA_SMI_TIMEOUT_S = 0.3


# ------------------------------------------------------------------------------ the job side


def detect(
    environ: Mapping[str, str] | None = None,
    nodes: int | None = None,
    *,
    proc: str = PROC_NVIDIA,
    system_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS,
    ofi_dirs: tuple[str, ...] = OFI_DIRS,
    smi_timeout_s: float = NVIDIA_SMI_TIMEOUT_S,
) -> dict[str, str]:
    """This node's fingerprint, as far as it can be learnt in milliseconds; never raises.
    `AUTOTUNER_FINGERPRINT` (same `key=value&...` form as the header) overrides what it names, and
    `off` turns detection off (nothing is sent)."""
    environ = os.environ if environ is None else environ
    override = environ.get(OVERRIDE, "").strip()
    if override.lower() in ("off", "none", "0"):
        return {}
    found: dict[str, str] = {}
    probes = (
        lambda: _nvidia(proc, environ, smi_timeout_s),
        lambda: {"nccl": nccl_version(environ, system_dirs)},
        lambda: {"aws_ofi_nccl": ofi_version(environ, system_dirs, ofi_dirs)},
    )
    for probe in probes:
        try:
            found.update({k: v for k, v in probe().items() if v})
        except Exception:  # best effort: what cannot be read is not sent
            continue
    if nodes is not None and nodes > 0:
        found["nodes"] = str(nodes)
    found.update(decode(override))
    return found


def _nvidia(proc: str, environ: Mapping[str, str], smi_timeout_s: float) -> dict[str, str | None]:
    driver, gpu = driver_from_proc(proc), gpu_from_proc(proc)
    if driver is None and smi_timeout_s > 0:
        smi_driver, smi_gpu = _nvidia_smi(environ, smi_timeout_s)
        driver, gpu = driver or smi_driver, gpu or smi_gpu
    return {"driver": driver, "gpu": gpu}


def driver_from_proc(proc: str = PROC_NVIDIA) -> str | None:
    """`NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ...` (and the open module's line)."""
    try:
        with open(os.path.join(proc, "version")) as f:
            text = f.read(4096)
    except OSError:
        return None
    m = re.search(r"Kernel Module\b[^\n]*?\s(\d+\.\d+(?:\.\d+)*)\s", text)
    return m.group(1) if m else None


def gpu_from_proc(proc: str = PROC_NVIDIA) -> str | None:
    """The GPU model of /proc/driver/nvidia/gpus/*/information (`Model: NVIDIA H100 80GB HBM3`);
    several models on one node are joined with ' + '."""
    models = set()
    try:
        gpus = sorted(os.listdir(os.path.join(proc, "gpus")))
    except OSError:
        return None
    for gpu in gpus:
        try:
            with open(os.path.join(proc, "gpus", gpu, "information")) as f:
                m = re.search(r"^Model:\s*(.+?)\s*$", f.read(4096), re.M)
        except OSError:
            continue
        if m:
            models.add(m.group(1))
    return " + ".join(sorted(models)) or None


def _nvidia_smi(environ: Mapping[str, str], timeout_s: float) -> tuple[str | None, str | None]:
    """`nvidia-smi`, only where /proc did not say, killed after `timeout_s`: a GPU in a bad state can
    hold it for seconds, and the hook's time bound is the job's."""
    path = environ.get("PATH", os.defpath)
    if not any(os.access(os.path.join(d, "nvidia-smi"), os.X_OK) for d in path.split(os.pathsep) if d):
        return None, None  # not installed: no fork (nor import) to find that out
    import subprocess

    command = ["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"]
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env={"PATH": path}, start_new_session=True)  # fmt: skip
    except OSError:
        return None, None
    try:
        stdout, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:  # its whole session; not waited for: one stuck in the driver dies when the driver lets it
            os.killpg(proc.pid, 9)
        except OSError:
            proc.kill()
        return None, None
    rows = [line.split(",", 1) for line in stdout.splitlines() if "," in line]
    if proc.returncode != 0 or not rows:
        return None, None
    drivers = sorted({r[0].strip() for r in rows})
    models = sorted({r[1].strip() for r in rows})
    return drivers[0] if re.fullmatch(_VERSION, drivers[0]) else None, " + ".join(models) or None


def _search_dirs(environ: Mapping[str, str], system_dirs: tuple[str, ...]) -> list[str]:
    """Where the job's dynamic loader would look, in its order: LD_LIBRARY_PATH, then the NCCL of a
    pip wheel beside this Python (what torch loads), then the system's directories."""
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += [
        os.path.join(p, "nvidia", "nccl", "lib")
        for p in sys.path
        if p.endswith(("site-packages", "dist-packages"))
    ]
    return list(dict.fromkeys([*dirs, *system_dirs]))


def _preloaded(environ: Mapping[str, str], pattern: str) -> list[str]:
    return [
        p
        for p in re.split(r"[:\s]+", environ.get("LD_PRELOAD", ""))
        if re.search(pattern, os.path.basename(p))
    ]


def nccl_version(environ: Mapping[str, str], system_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS) -> str | None:
    """The version of the libnccl.so the job would load: from the file's own name
    (libnccl.so.2.21.5), or from the pip wheel it came with (nvidia_nccl_cu12-2.21.5.dist-info)."""
    files = _preloaded(environ, r"^libnccl\.so")
    for directory in _search_dirs(environ, system_dirs):
        files += [os.path.join(directory, name) for name in ("libnccl.so.2", "libnccl.so")]
    for path in files:
        if not os.path.exists(path):
            continue
        m = re.search(r"libnccl\.so\.(\d+\.\d+\.\d+)", os.path.basename(os.path.realpath(path)))
        if m:
            return m.group(1)
        directory = os.path.dirname(os.path.realpath(path))
        site = os.path.dirname(
            os.path.dirname(os.path.dirname(directory))
        )  # of .../site-packages/nvidia/nccl/lib
        for folder, pattern in (
            (directory, r"libnccl\.so\.(\d+\.\d+\.\d+)$"),
            (site, r"nvidia_nccl_cu\d+-(\d+\.\d+\.\d+)[^/]*\.dist-info$"),
        ):
            found = _versions_named(folder, pattern)
            if found:
                return found[-1]
        return None  # the first one found is what loads: no guessing from the next
    return None


def _versions_named(folder: str, pattern: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = [m.group(1) for m in map(re.compile(pattern).match, names) if m]
    return sorted(found, key=lambda v: [int(x) for x in v.split(".")])


def _ofi_names(environ: Mapping[str, str]) -> list[str] | None:
    """The plugin file names NCCL would try (None: NCCL_NET_PLUGIN=none, no plugin at all)."""
    plugin = environ.get("NCCL_NET_PLUGIN", "").strip()
    if plugin.lower() == "none":
        return None
    if plugin:
        return [plugin] if ".so" in plugin else [f"libnccl-net-{plugin}.so", f"{plugin}"]
    return ["libnccl-net.so", "libnccl-net-ofi.so"]


def ofi_version(
    environ: Mapping[str, str],
    system_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS,
    ofi_dirs: tuple[str, ...] = OFI_DIRS,
) -> str | None:
    """The aws-ofi-nccl version of the NCCL net plugin the job would load: the plugin says it in its
    own `Initializing aws-ofi-nccl 1.9.1-aws` string. Another vendor's plugin: None."""
    names = _ofi_names(environ)
    if names is None:
        return None
    files = _preloaded(environ, r"^libnccl-net")
    if any(os.sep in n for n in names):
        files += [n for n in names if os.sep in n]
    else:
        for directory in [*_search_dirs(environ, system_dirs), *ofi_dirs]:
            files += [os.path.join(directory, name) for name in names]
    for path in files:
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        return _ofi_version_in(path, size)
    return None


def _ofi_version_in(path: str, size: int) -> str | None:
    if not 0 < size <= OFI_SCAN_LIMIT:
        return None
    import mmap

    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            m = re.search(rb"aws-ofi-nccl (\d+\.\d+[0-9A-Za-z.+-]*)", data)  # type: ignore[call-overload]
            return bytes(m.group(1)).decode() if m else None  # read before the map closes
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------ on the wire


def encode(fingerprint: Mapping[str, Any]) -> str:
    """The header's value: `driver=550.54.15&gpu=NVIDIA+H100...` (keys sorted: one job stack, one text)."""
    return urlencode(sorted((k, str(v)) for k, v in fingerprint.items() if k in KEYS and v not in (None, "")))


def decode(text: str | bytes) -> dict[str, str]:
    """A header (or AUTOTUNER_FINGERPRINT) read back; anything malformed is left out, never raised:
    keys it does not know, values that are not one line of printable ASCII, a node count that is not
    a number. Garbage reads as nothing known."""
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    if not text or len(text) > MAX_HEADER:
        return {}
    try:
        pairs = parse_qsl(text, keep_blank_values=False, max_num_fields=16)
    except ValueError:
        return {}
    out: dict[str, str] = {}
    for key, value in pairs:
        if key not in KEYS or not re.fullmatch(_VALUE, value) or value != value.strip():
            continue
        if key == "nodes" and not (value.isascii() and value.isdigit() and 0 < int(value) <= 1_000_000):
            continue
        out[key] = value
    return out


def digest(fingerprint: Mapping[str, Any]) -> str:
    return hashlib.sha256(encode(fingerprint).encode()).hexdigest()


# ------------------------------------------------------------------------------ comparing


def comparable(recorded: Mapping[str, Any] | None, nodes: int | None = None) -> dict[str, str]:
    """A trial's recorded fingerprint (autotuner.tuning.ingest.fingerprint) in the comparable shape.
    The GPU model only where the trial ran on CUDA (on CPU its device name is the processor's)."""
    recorded = recorded if isinstance(recorded, Mapping) else {}  # a row written by hand: nothing known
    versions = recorded.get("versions") or {}
    out = {
        "gpu": recorded.get("device_name") if recorded.get("device") == "cuda" else None,
        "driver": recorded.get("driver"),
        "nccl": versions.get("nccl") if isinstance(versions, dict) else None,
        "aws_ofi_nccl": recorded.get("ofi_plugin"),
        "nodes": nodes if nodes is not None else recorded.get("nnodes"),
    }
    return {k: str(v) for k, v in out.items() if v not in (None, "")}


def _same(key: str, a: str, b: str) -> bool:
    if key == "gpu":
        return a.strip() == b.strip()
    va, vb = re.match(_VERSION, a.strip()), re.match(_VERSION, b.strip())
    if va and vb:  # 2.21.5 and 2.21.5+cuda12.4 are one NCCL; 1.9.1-aws and 1.9.1 one plugin
        return va.group(0) == vb.group(0)
    return a.strip() == b.strip()


def compare(validated: Mapping[str, Any], job: Mapping[str, Any]) -> tuple[bool | str, dict[str, list[str]]]:
    """(True | False | "unknown", {key: [validated on, job's]}) over the keys both sides know."""
    diff: dict[str, list[str]] = {}
    compared = 0
    for key in KEYS:
        a, b = validated.get(key), job.get(key)
        if a in (None, "") or b in (None, ""):
            continue
        compared += 1
        if not _same(key, str(a), str(b)):
            diff[key] = [str(a), str(b)]
    if not compared:
        return "unknown", {}
    return not diff, diff


def stack_changed(diff: Mapping[str, Any]) -> bool:
    """Whether a difference is one a re-validation answers (the stack, not the node count)."""
    return any(key in STACK for key in diff)


def describe_diff(diff: Mapping[str, Any]) -> str:
    """`driver 550.54.15 -> 570.86.15, NCCL 2.21.5 -> 2.23.4` (printable: a stored side may be a trial's)"""
    return printable(", ".join(f"{LABELS.get(k, k)} {was} -> {now}" for k, (was, now) in diff.items()))


def describe(fingerprint: Mapping[str, Any] | None) -> str:
    """`NVIDIA H100 80GB HBM3, driver 550.54.15, NCCL 2.21.5, aws-ofi-nccl 1.9.1, 2 nodes` (printable
    ASCII on one line, whatever a trial recorded: it goes into comment lines, logs and terminals)"""
    if fingerprint is not None and not isinstance(fingerprint, Mapping):  # a stored one written by hand
        return "an unreadable stack"
    fp = fingerprint or {}
    parts = [str(fp["gpu"])] if fp.get("gpu") else []
    parts += [f"{LABELS[k]} {fp[k]}" for k in ("driver", "nccl", "aws_ofi_nccl") if fp.get(k)]
    if fp.get("nodes"):
        parts.append(f"{fp['nodes']} node{'' if str(fp['nodes']) == '1' else 's'}")
    return printable(", ".join(parts)) or "an unrecorded stack"


def timed_detect(
    environ: Mapping[str, str] | None = None, nodes: int | None = None
) -> tuple[dict[str, str], float]:
    """`detect` and the seconds it took (the hook takes them off its fetch's deadline)."""
    started = time.monotonic()
    found = detect(environ, nodes)
    return found, time.monotonic() - started
