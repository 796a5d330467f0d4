"""Local executor: torchrun on this machine, optionally inside an emulated bandwidth-limited fabric.

Several nodes on one machine are emulation, labelled so: `ranks` (N x G ranks in one torchrun),
`hostids` (a torchrun agent per node, each its own NCCL_HOSTID, so NCCL takes every node for a host
of its own and talks its socket transport over loopback: NCCL's network knobs act, even with every
node on one GPU), `namespaces` (a network namespace and hostname per node, a shaped bridge between).

Each launch runs a generated `launch.sh` (the dryrun, golden-tested) in a new session. The script
writes the trial's exit code to a file, so a tuner that was killed and restarted can still tell how
its launches ended. torchrun puts every worker in a session of its own, so killing a launch means
killing every process tagged with its `AUTOTUNER_LAUNCH` id, not just one process group.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autotuner.executors.base import AppDryrun, Description, Executor, LaunchRequest, LaunchState
from autotuner.executors.files import open_log, read_small_text, write_new
from autotuner.executors.local.memory import available_bytes, check_host_memory
from autotuner.executors.local.netns import PORT as NODE_PORT
from autotuner.executors.local.netns import NodeNetwork, sweep_command
from autotuner.executors.local.options import FABRIC_RATE
from autotuner.executors.script import (
    EXIT_CODE_FILE,
    EXIT_NO_NETNS,
    ScriptRequest,
    describe_exit,
    exports,
    read_exit_code,
    without_comm_env,
)

LAUNCH_TAG = "AUTOTUNER_LAUNCH"
# nodes=hostids: NCCL's socket transport over loopback between the emulated nodes. NCCL takes ranks
# with another host hash (hostname + boot id, or NCCL_HOSTID) for other hosts: no P2P or SHM between.
HOSTID_ENV = {
    "NCCL_NET": "Socket",
    "NCCL_SOCKET_IFNAME": "lo",
    "NCCL_IB_DISABLE": "1",
    "GLOO_SOCKET_IFNAME": "lo",
}
# ... and where nodes share GPUs, nothing that reaches a device directly (one GPU is "on" every node).
SHARED_GPU_ENV = {
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NCCL_MNNVL_ENABLE": "0",
}
_RATE = re.compile(FABRIC_RATE)
_NETNS = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")  # + "-n199" stays a short file name


@dataclass(frozen=True)
class Fabric:
    """An emulated fabric: the ranks run in a network namespace whose loopback is rate-limited
    (tbf). Results made this way are labelled emulation; it never stands in for a real cluster."""

    rate: str  # e.g. "2gbit"
    # Just above loopback's 64 KiB MTU (the least tbf accepts without dropping packets): a bigger
    # bucket refills while the step computes and lets spaced-out calls beat the rate.
    burst: str = "128kb"
    latency: str = "50ms"

    def __post_init__(self) -> None:
        if not _RATE.fullmatch(self.rate):
            raise ValueError(f"fabric rate {self.rate!r}: use a number with kbit, mbit or gbit, e.g. 2gbit")

    def label(self) -> str:
        return f"emulated fabric: loopback limited to {self.rate} (tbf) in a network namespace"

    def setup(self, netns: str) -> list[list[str]]:
        """The commands that make the namespace: create it, bring up its loopback, limit the rate."""
        return [
            ["ip", "netns", "add", netns],
            ["ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up"],
            ["ip", "netns", "exec", netns, "tc", "qdisc", "add", "dev", "lo", "root", "tbf",
             "rate", self.rate, "burst", self.burst, "latency", self.latency],
        ]  # fmt: skip


@dataclass(frozen=True)
class LocalRequest(ScriptRequest):
    env: dict[str, str]  # what the launch exports (also written into the script)
    tag: str


class LocalExecutor(Executor):
    name = "local"

    def __init__(
        self, *, fabric: Fabric | None = None, nodes: str = "one", gpus: int | Sequence[str] | None = None,
        rdzv_port: int | None = None,
    ) -> None:  # fmt: skip
        self.fabric = fabric
        # How N nodes run on this box (labelled as emulation in the script; never a stand-in for real
        # nodes): "ranks", N x G ranks in one torchrun; "hostids", an agent and NCCL host id per node;
        # "namespaces", a network namespace per node.
        self.nodes = nodes
        # The GPUs launches may use, as CUDA_VISIBLE_DEVICES names them (a count: the first ones)
        if gpus is None:
            self.devices = visible_gpus()
        else:
            self.devices = [str(i) for i in range(gpus)] if isinstance(gpus, int) else list(gpus)
        self.gpus = len(self.devices)
        self.rdzv_port = rdzv_port  # nodes=hostids: None picks a free port per launch
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def dryrun(self, launch: LaunchRequest) -> AppDryrun[LocalRequest]:
        if launch.nnodes != 1 and self.nodes == "one":
            raise ValueError(
                "the local executor runs one node; nodes=ranks, nodes=hostids or nodes=namespaces emulates more"
            )
        if self.fabric is not None and self.nodes == "hostids":  # its nodes talk over the host's loopback
            raise ValueError("a fabric is not emulated with nodes=hostids (loopback, unshaped): use nodes=namespaces, "
                             "whose links are shaped at the fabric's rate, or leave fabric out")  # fmt: skip
        if launch.spec.get("device") != "cpu":
            check_gpu_sharing(self.nodes, launch.nnodes, launch.nproc_per_node, self.gpus)
        check_host_memory(launch.spec, launch.nnodes * launch.nproc_per_node, available_bytes())
        tag = f"{launch.name}-{os.urandom(3).hex()}"
        q = shlex.quote
        lines = [
            "#!/bin/sh",
            f"# nccl-autotuner launch {launch.name} (local executor)",
            f"cd {q(str(launch.workdir))}",
        ]
        lines += exports(launch.env)
        if self.nodes == "namespaces":
            lines += self._namespaced(launch, tag)
        elif self.nodes == "hostids":
            lines += self._hostids(launch, tag)
        else:
            lines += self._standalone(launch)
        exit_file = launch.workdir / EXIT_CODE_FILE  # written whole (rename), so never read half-written
        lines += [f"echo $rc > {q(str(exit_file))}.tmp && mv {q(str(exit_file))}.tmp {q(str(exit_file))}",
                  "exit $rc", ""]  # fmt: skip
        script = "\n".join(lines)
        return AppDryrun(
            LocalRequest(script, launch.workdir / "launch.sh", dict(launch.env), tag), script, launch
        )

    def _standalone(self, launch: LaunchRequest) -> list[str]:
        """One torchrun for every rank, in an emulated fabric (a shaped loopback) if one is set."""
        lines = []
        if launch.nnodes != 1:
            lines.append(
                f"# emulation: {launch.nnodes} nodes as {launch.nnodes} x {launch.nproc_per_node} local ranks"
            )
        torchrun = [
            launch.python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc-per-node={launch.nproc_per_node * launch.nnodes}", *launch.trial_argv(),
        ]  # fmt: skip
        command = shlex.join(torchrun)
        if self.fabric is None:
            return [*lines, command, "rc=$?"]
        netns = _netns_name(launch)
        create, *configure = (shlex.join(argv) for argv in self.fabric.setup(netns))
        # Stale namespaces of the study first (a killed launcher ran no trap), as nodes=namespaces does.
        # Every step checked: a rate tc refuses left an unshaped loopback measured as the fabric.
        return [*lines, f"# {self.fabric.label()}", sweep_command(_study_prefix(netns)),
                f"{create} || exit {EXIT_NO_NETNS}", f"trap 'ip netns del {netns}' EXIT",
                *(f"{step} || exit {EXIT_NO_NETNS}" for step in configure),
                f"ip netns exec {netns} {command}", "rc=$?"]  # fmt: skip

    def _namespaced(self, launch: LaunchRequest, tag: str) -> list[str]:
        """A namespace per node, a torchrun agent in each (c10d rendezvous on node 0's address),
        pinned to cores of their own where there are enough; the namespaces go when the script ends."""
        network = node_network(launch, self.fabric)
        create, *configure = (shlex.join(argv) for argv in network.setup())
        teardown = "; ".join(f"{shlex.join(argv)} 2>/dev/null" for argv in network.teardown())
        lines = [f"# {network.label()}", sweep_command(_study_prefix(network.prefix)), f"trap {shlex.quote(teardown)} EXIT",
                 "trap 'exit 143' TERM INT HUP",  # a cancel (SIGTERM) still runs the EXIT trap
                 f"{create} || exit {EXIT_NO_NETNS}", *(f"{step} || exit {EXIT_NO_NETNS}" for step in configure)]  # fmt: skip
        agents = node_agents(
            network, launch.nproc_per_node, launch.python, tag, launch.trial_argv(), self.devices
        )
        return lines + _in_parallel(agents)

    def _hostids(self, launch: LaunchRequest, tag: str) -> list[str]:
        """A torchrun agent per node on this host, each with its own NCCL host id (c10d rendezvous
        on loopback); they share the machine's GPUs when there are fewer than ranks."""
        port = self.rdzv_port or free_port()
        agents = hostid_agents(launch.name, launch.nnodes, launch.nproc_per_node, launch.python, tag,
                               launch.trial_argv(), port, self.devices)  # fmt: skip
        return [f"# {hostids_label(launch.nnodes, launch.nproc_per_node, self.gpus)}", *_in_parallel(agents)]

    def pinned_env(self, launch: LaunchRequest) -> dict[str, str]:
        if launch.nnodes == 1 or self.nodes in ("one", "ranks"):
            return {}
        if self.nodes == "namespaces":
            return {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
        shared = self.gpus and self.gpus < launch.nnodes * launch.nproc_per_node
        return {**HOSTID_ENV, "NCCL_HOSTID": "(one per node)", **(SHARED_GPU_ENV if shared else {})}

    def schedule(self, dryrun: AppDryrun[LocalRequest]) -> str:
        req, launch = dryrun.request, dryrun.launch
        req.write(launch)
        env = without_comm_env(os.environ)
        env[LAUNCH_TAG] = req.tag
        write_new(launch.workdir / "tag", req.tag)
        with os.fdopen(open_log(launch.log_path), "ab") as log:
            proc = subprocess.Popen(
                ["/bin/sh", str(req.script_path)],
                cwd=launch.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._children[proc.pid] = proc
        return str(proc.pid)

    def describe(self, backend_id: str, launch: LaunchRequest) -> Description:
        pid = int(backend_id)
        child = self._children.get(pid)
        if child is not None:
            child.poll()  # reap, so the pid does not linger as a zombie
        # Liveness first: the script writes exit_code just before it exits, so a launch seen dead
        # here has its exit code on disk below, unless it was killed. Our own child is alive until
        # reaped (its pid cannot be reused meanwhile); /proc is asked only for a launch re-attached
        # after a restart. Right after a vfork+exec, /proc/PID/cmdline can still read empty.
        alive = child.returncode is None if child is not None else _alive(pid, launch.workdir / "launch.sh")
        exit_code = read_exit_code(launch.workdir)
        if exit_code is not None:
            self._children.pop(pid, None)
            return describe_exit(exit_code)
        if alive:
            return Description(LaunchState.RUNNING)
        if child is not None and child.returncode is not None and child.returncode < 0:
            return Description(
                LaunchState.CANCELLED, child.returncode, f"killed by signal {-child.returncode}"
            )
        if child is not None and child.returncode is not None:
            # The script ended before writing exit_code (`ip netns add ... || exit 97`): its own code says why.
            self._children.pop(pid, None)
            return describe_exit(child.returncode)
        # Not our child (the tuner restarted) and no exit code written: nothing says the config failed it.
        return Description(LaunchState.CANCELLED, None, "launch process is gone without an exit code")

    def how_cancelled(self, backend_id: str) -> str:
        return f"SIGTERM then SIGKILL to process tree {backend_id}"

    def cancel(self, backend_id: str, launch: LaunchRequest) -> str | None:
        self._stop(int(backend_id), launch)  # SIGKILLs what SIGTERM left: the end is known
        return None

    def abandon(self, launch: LaunchRequest) -> None:
        """A launch started whose pid the store never got (the tuner killed between the two): its
        processes, found by its tag; else the resumed study's retry ran beside it, unfollowed."""
        self._stop(None, launch)

    def _stop(self, pid: int | None, launch: LaunchRequest) -> None:
        tag = read_small_text(launch.workdir / "tag")
        # Only a pid that is still our launch: one recorded before a restart (a cancelled study's
        # leftover) may name another process now, and its tree is not ours to kill.
        child = self._children.get(pid) if pid is not None else None
        ours = pid is not None and (
            (child is not None and child.returncode is None) or _alive(pid, launch.workdir / "launch.sh")
        )
        pids = (set(_descendants(pid)) | {pid}) if ours and pid is not None else set()
        if tag:
            pids |= tagged(tag)
        signal_all(pids, signal.SIGTERM)
        deadline = time.monotonic() + self.cancel_grace_s
        while time.monotonic() < deadline and any(_exists(p) for p in pids):
            self._reap()
            time.sleep(0.1)
        # SIGKILL what is left, and what was forked meanwhile (torchrun starting a worker), until none is
        # left or a few rounds passed: a cancel that returned has stopped the tree, not only signalled it.
        for _ in range(20):
            if tag:
                pids |= tagged(tag)
            pids |= {child for p in list(pids) if _exists(p) for child in _descendants(p)}
            left = {p for p in pids if _exists(p)}
            if not left:
                break
            signal_all(left, signal.SIGKILL)
            self._reap()
            time.sleep(0.05)
        self._reap()
        if self.nodes == "namespaces" or self.fabric is not None:  # a killed script ran no trap
            subprocess.run(["sh", "-c", sweep_command(_netns_name(launch))], check=False, capture_output=True)

    def _reap(self) -> None:
        for child in list(self._children.values()):
            child.poll()


def _in_parallel(agents: list[list[str]]) -> list[str]:
    """Shell: every node's agent in the background; the launch's exit code is the worst of theirs."""
    lines = []
    for i, command in enumerate(agents):
        lines += [f"{shlex.join(command)} &", f"node{i}=$!"]
    return [
        *lines,
        "rc=0",
        *(f'wait "$node{i}"; r=$?; [ "$r" -gt "$rc" ] && rc=$r' for i in range(len(agents))),
    ]


def visible_gpus() -> list[str]:
    """The GPUs this machine's launches can see, as CUDA_VISIBLE_DEVICES names them (indices, UUIDs or
    MIG ids, as given: CUDA stops at the first empty or -1 entry), else `nvidia-smi -L`'s; [] without.
    An emulated node is given some of these, never other indices: a tuner given GPUs 4-7 ran its
    nodes on 0-3, someone else's."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        devices = []
        for entry in (d.strip() for d in visible.split(",")):
            if not entry or entry == "-1":
                break
            devices.append(entry)
        return devices
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i in range(sum(line.startswith("GPU ") for line in listed.splitlines()))]


def node_gpus(devices: Sequence[str], node: int, per_node: int) -> str:
    """CUDA_VISIBLE_DEVICES of an emulated node whose ranks have GPUs of their own: its share."""
    return ",".join(devices[node * per_node + r] for r in range(per_node))


def check_gpu_sharing(nodes_mode: str, nnodes: int, per_node: int, gpus: int) -> None:
    """NCCL refuses two ranks of one host on one GPU ("Duplicate GPU detected"): say so before
    launching, with the fix. Emulated nodes may share GPUs (each is a host of its own)."""
    if gpus <= 0:
        return
    ranks_of_a_host = per_node * (nnodes if nodes_mode in ("one", "ranks") else 1)
    if ranks_of_a_host > gpus:
        raise ValueError(
            f"{ranks_of_a_host} ranks of one host on {gpus} GPU(s): NCCL refuses two ranks of one host on "
            f"one GPU. Run at most {gpus} rank(s) per node (--nproc {gpus}), or emulate nodes that share "
            "the GPUs, each a host of its own (--nnodes N --executor-option nodes=hostids)"
        )


def hostids_label(nnodes: int, per_node: int, gpus: int) -> str:
    where = (
        ("each on GPUs of its own" if gpus >= nnodes * per_node else f"sharing {gpus} GPU(s)")
        if gpus
        else "on CPU"
    )
    return (f"emulated: {nnodes} nodes as torchrun agents on one machine, each its own NCCL_HOSTID, "
            f"NCCL's socket transport over loopback (unshaped), {where}")  # fmt: skip


def hostid_agents(
    name: str, nnodes: int, per_node: int, python: str, tag: str, argv: list[str], port: int,
    devices: Sequence[str],
) -> list[list[str]]:  # fmt: skip
    """One torchrun agent per emulated node running `argv`: its own NCCL_HOSTID, NCCL on sockets over
    loopback, c10d rendezvous on 127.0.0.1:`port` (node 0 holds the store). Ranks of a node get GPUs
    of their own (`devices`: what this machine's launches may use) when there are enough for every
    rank, else every node sees them all."""
    gpus = len(devices)
    own_gpus = gpus >= nnodes * per_node
    commands = []
    for i in range(nnodes):
        env = {"NCCL_HOSTID": f"{name}-node{i}", **HOSTID_ENV}
        if gpus and own_gpus:
            env["CUDA_VISIBLE_DEVICES"] = node_gpus(devices, i, per_node)
        elif gpus:
            env.update(SHARED_GPU_ENV)
        agent = [
            *_after_env(python), "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={per_node}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={tag}",
            f"--rdzv-conf=is_host={str(i == 0).lower()}", "--local-addr=127.0.0.1", *argv,
        ]  # fmt: skip
        commands.append(["env", *(f"{k}={v}" for k, v in env.items()), *agent])
    return commands


def _after_env(python: str) -> list[str]:
    """The interpreter as env(1) runs it: env takes every word with '=' for one more variable (a venv
    under /x/proj=v2 failed every launch, exit 127), so such a path is run through sh."""
    return [python] if "=" not in python else ["sh", "-c", 'exec "$@"', "sh", python]


def free_port() -> int:
    """A TCP port free on loopback right now (the rendezvous of one launch)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_agents(
    network: NodeNetwork, per_node: int, python: str, tag: str, argv: list[str], devices: Sequence[str] = ()
) -> list[list[str]]:
    """One torchrun agent per emulated node running `argv` (c10d rendezvous on node 0's address),
    each pinned to cores of its own where there are enough, in a UTS namespace named after its node
    (NCCL tells hosts apart by hostname: two nodes on one GPU are then two hosts, not a duplicate)."""
    cores = os.cpu_count() or 1
    gpus = len(devices)
    own_gpus = gpus >= network.nodes * per_node
    commands = []
    for i in range(network.nodes):
        agent = [
            *_after_env(python), "-m", "torch.distributed.run", f"--nnodes={network.nodes}", f"--nproc-per-node={per_node}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={network.address(0)}:{NODE_PORT}", f"--rdzv-id={tag}",
            # The namespace addresses are nothing the hostname resolves to: say which node holds the
            # store, and which address each node is reached at.
            f"--rdzv-conf=is_host={str(i == 0).lower()}", f"--local-addr={network.address(i)}", *argv,
        ]  # fmt: skip
        cpus = f"{i * per_node}-{(i + 1) * per_node - 1}"
        pin = ["taskset", "-c", cpus] if cores >= network.nodes * per_node else []
        share = [f"CUDA_VISIBLE_DEVICES={node_gpus(devices, i, per_node)}"] if gpus and own_gpus else []
        hostname = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', network.node(i)]
        commands.append(["ip", "netns", "exec", network.node(i), *hostname, *pin, "env", "GLOO_SOCKET_IFNAME=eth0",
                         "NCCL_SOCKET_IFNAME=eth0", *share, *agent])  # fmt: skip
    return commands


def node_network(launch: LaunchRequest, fabric: Fabric | None) -> NodeNetwork:
    """The namespaces of a launch's emulated nodes, named after it (a sweep finds them by name)."""
    return NodeNetwork(_netns_name(launch), launch.nnodes, fabric.rate if fabric else None)


def _study_prefix(prefix: str) -> str:
    """What the launches of one study share ("at-3f2a1c-s12-l34" -> "at-3f2a1c-s12-l"): one runs at a time, so
    namespaces left by an earlier one (its launcher killed) are stale."""
    return re.sub(r"(-l)\d+$", r"\1", prefix)


def _netns_name(launch: LaunchRequest) -> str:
    """ "at-<study's directory>-<launch>", e.g. "at-3f2a1c-s1-l7". A launch's name is unique within its
    store only: two stores on one host named their launches alike, and one's sweep removed the other's
    live nodes. The hash of the study's directory tells them apart."""
    where = hashlib.sha256(str(launch.workdir.parent.absolute()).encode()).hexdigest()[:6]
    name = f"at-{where}-" + re.sub(r"[^a-z0-9-]", "-", launch.name.lower())
    if not _NETNS.match(name):
        raise ValueError(f"launch name {launch.name!r} makes no network namespace name ({name!r})")
    return name


def _exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _alive(pid: int, script: Path) -> bool:
    """Running, and really our launch (pids get reused after a restart)."""
    if not _exists(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(script).encode() in cmdline


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _descendants(pid: int) -> list[int]:
    tree, out, todo = _children_map(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tagged(tag: str) -> set[int]:
    """Every process whose environment carries this launch's tag (workers in their own sessions)."""
    return carrying(LAUNCH_TAG, tag)


def carrying(name: str, value: str) -> set[int]:
    """Every process whose environment holds `name=value` (one it inherited from whatever started it)."""
    needle = f"{name}={value}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def signal_all(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
