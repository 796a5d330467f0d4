"""`make demo`: the service with an embedded SQLite store, a small study on 2 local CPU ranks, the
dashboard URL while it runs, and the tuned export lines a job would get when it ends.

    python -m autotuner.cli.demo [--port 8000] [--keep]

Everything lives under .data/demo/ (fresh each run). `--keep` leaves the service up afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from autotuner.cli.claim_report import ClaimText, confirmed_line, print_claim
from autotuner.cli.terminal import labelled, shown
from autotuner.store.states import TERMINAL, StudyState
from autotuner.tuning.outcome import Outcome

ROOT = Path(__file__).resolve().parents[2]  # the checkout: autotuner/cli/demo.py
EXAMPLES = ROOT / "deploy" / "examples"
console = Console(stderr=True)


def _port(wanted: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", wanted))
            return wanted
        except OSError:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    # the docstring's first paragraph, whole: its first line stopped mid-sentence
    parser = argparse.ArgumentParser(
        prog="autotuner.cli.demo", description=" ".join(__doc__.split("\n\n")[0].split())
    )
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--keep", action="store_true", help="keep the service running afterwards")
    args = parser.parse_args(argv)

    data = ROOT / ".data" / "demo"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    port = _port(args.port)
    url = f"http://127.0.0.1:{port}"
    token = secrets.token_urlsafe(16)
    env = {**os.environ, "AUTOTUNER_DATA_DIR": str(data), "AUTOTUNER_PORT": str(port),
           "AUTOTUNER_TOKENS": f"{token}:admin", "AUTOTUNER_PUBLIC_READ": "1",
           "AUTOTUNER_CACHE_DIR": str(data / "hook-cache")}  # fmt: skip
    env.pop("AUTOTUNER_DATABASE_URL", None)
    log = open(data / "service.log", "wb")  # lives as long as the service
    service = subprocess.Popen([sys.executable, "-m", "autotuner", "serve"], env=env, stdout=log, stderr=log)
    try:
        return _run(url, token, env, service, data, args.keep)
    finally:
        if not args.keep and service.poll() is None:
            service.send_signal(signal.SIGTERM)
            service.wait(timeout=30)


DEMO_SETTINGS: dict[str, Any] = {"executor": "local", "nproc_per_node": 2, "trials": 3, "candidates_per_launch": 4,
                                 "iterations": 30, "warmup": 5, "confirm_rounds": 6}  # fmt: skip


def _run(url: str, token: str, env: dict[str, str], service: subprocess.Popen, data: Path, keep: bool) -> int:
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    if not _ready(client, service, data):
        return 1
    console.print(f"service up at [bold]{url}[/bold] (store {data / 'autotuner.db'})")
    study = _create(client)
    if study is None:
        return 1
    console.print(
        f"dashboard: [bold link={url}/studies/{study['id']}]{url}/studies/{study['id']}[/bold link]"
    )
    study = _follow(client, study)
    if study["state"] != StudyState.DONE:
        console.print(labelled(f"study {study['state']}:", study["error"]), highlight=False)
        return 1
    _print_trials(client, study["id"])
    outcome = Outcome.load(study["outcome"]) or Outcome()
    print_claim(console, outcome.ladder or [], ClaimText.model_validate(study["claim"]))  # the API's words
    if confirmed := confirmed_line(outcome):
        console.print(confirmed)
    console.print(shown(outcome.decision or ""), highlight=False)
    console.print("\n$ autotuner env --server ... --cluster demo-cpu --workload demo-dlrm")
    # --token=VALUE: a token_urlsafe token may start with "-", which argparse reads as an option
    hook = [sys.executable, "-m", "autotuner", "env", "--server", str(client.base_url), f"--token={token}",
            "--cluster", "demo-cpu", "--workload", "demo-dlrm"]  # fmt: skip
    subprocess.run(hook, env=env, check=False)
    _linger(url, data, service, keep)
    return 0


def _ready(client: httpx.Client, service: subprocess.Popen, data: Path, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if client.get("/readyz").status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if service.poll() is not None:
            break
        time.sleep(0.1)
    console.print(f"[red]the service did not start:[/red] see {data / 'service.log'}")
    return False


def _create(client: httpx.Client) -> dict | None:
    body = {"name": "demo", "cluster": "demo-cpu", "settings": DEMO_SETTINGS,
            "workload": json.loads((EXAMPLES / "workload-demo.json").read_text()),
            "space": yaml.safe_load((EXAMPLES / "space-demo.yaml").read_text())}  # fmt: skip
    created = client.post("/v1/studies", json=body)
    if created.status_code != 201:
        console.print(labelled("could not create the study:", created.text), highlight=False)
        return None
    return created.json()


def _follow(client: httpx.Client, study: dict) -> dict:
    """A progress bar over the search launches until the study ends."""
    if not console.is_terminal:  # rich's bar draws nothing off a terminal (CI, `| tee`): silent for minutes
        return _follow_in_lines(client, study)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[best]}"), console=console) as bar:  # fmt: skip
        task = bar.add_task("queued", total=DEMO_SETTINGS["trials"], best="")
        while study["state"] not in TERMINAL:
            time.sleep(1)
            study = client.get(f"/v1/studies/{study['id']}").json()
            done, total, said = _standing(client, study)
            bar.update(task, description=study["state"], completed=done, total=total, best=said)
    return study


def _follow_in_lines(client: httpx.Client, study: dict) -> dict:
    """The bar's words, one plain line each time they change (a phase, a launch ended), not each poll."""
    last = None
    while study["state"] not in TERMINAL:
        time.sleep(1)
        study = client.get(f"/v1/studies/{study['id']}").json()
        done, total, said = _standing(client, study)
        line = f"{study['state']} {done}/{total}" + (f" {said}" if said else "")
        if line != last:
            console.print(shown(line), highlight=False, soft_wrap=True)
            last = line
    return study


def _standing(client: httpx.Client, study: dict) -> tuple[int, int, str]:
    """Search launches done, of how many, and the best so far (or the convergence check's progress)."""
    best = study["best"]["samples_per_s"] if study["best"] else None
    said = f"best {best:,.0f} samples/s" if best else ""
    if study["state"] == StudyState.CONFIRMING:
        said = _quality_progress(client, study["id"]) or said
    done = study["launches_done"]
    # the search is over: it may have measured every point before its budget of launches
    over = study["state"] in (StudyState.CONFIRMING, StudyState.DONE)
    return done, done if over else DEMO_SETTINGS["trials"], said


def _quality_progress(client: httpx.Client, study_id: int) -> str | None:
    """The convergence check while it trains, and its cost once done (None before it starts)."""
    # newest first: the listing is paged, and the check comes late (after the search and the ladder)
    page = client.get(f"/v1/studies/{study_id}/launches", params={"order": "desc"}).json()
    launches = [x for x in page if x["kind"] == "quality"]
    if not launches:
        return None
    last = launches[0]
    if last["wall_s"] is not None:
        return f"convergence check: {last['candidates']} models trained in {last['wall_s']:.0f} s"
    return f"convergence check: training {last['candidates']} models"


def browse_again(data: Path, port: int) -> str:
    """The command that serves this demo's results again: this environment's `autotuner` (a fresh
    `make demo` leaves none on PATH), the port the demo took, every path quoted for the shell."""
    autotuner = Path(sys.executable).parent / "autotuner"
    return (f"AUTOTUNER_DATA_DIR={shlex.quote(str(data))} AUTOTUNER_PUBLIC_READ=1 {shlex.quote(str(autotuner))} "
            f"serve --port {port}")  # fmt: skip


def _linger(url: str, data: Path, service: subprocess.Popen, keep: bool) -> None:
    if not keep:
        port = int(url.rsplit(":", 1)[1])
        console.print(f"\nto browse the results again (until the next `make demo`, which starts afresh): "
                      f"{browse_again(data, port)}", soft_wrap=True, highlight=False)  # fmt: skip
        return
    console.print(f"\nthe service keeps running at {url} (Ctrl-C to stop)")
    try:
        service.wait()
    except KeyboardInterrupt:
        pass


def _print_trials(client: httpx.Client, study_id: int) -> None:
    """The measured candidates, fastest first: what the study saw, and where each step's time goes."""
    rows = client.get(f"/v1/studies/{study_id}/trials", params={"sort": "samples_per_s", "order": "desc",
                                                                "limit": 12}).json()["data"]  # fmt: skip
    if not rows:
        console.print("no candidate was measured")
        return
    # Variables every row shares are said once, above. Fits 80 columns (a CI log, a narrow
    # terminal): numbers never wrap, the env column folds last.
    shared = {k: v for k, v in rows[0]["env"].items() if all(t["env"].get(k) == v for t in rows)}
    pipelines = {t.get("pipeline") for t in rows}
    console.print("[bold]fastest candidates[/bold] (env without its NCCL_ prefix)")
    said = [_env_text(shared, " ")] if shared else []
    if len(pipelines) == 1 and None not in pipelines:
        said.append(f"pipeline {pipelines.pop()}")
    if said:
        console.print(f"in every row: {', '.join(said)}")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    columns = ["kind", "precision", "batch", *(["pipeline"] if pipelines else []), "samples/s", "step ms",
               "q-err"]  # fmt: skip
    for col in columns:
        # the step's bars start in one column, so their lengths compare: its figures are padded instead
        left = col in ("kind", "precision", "pipeline", "step ms")
        table.add_column(col, no_wrap=True, justify="left" if left else "right")
    table.add_column("env", overflow="fold")
    longest = max((t.get("iter_ms") or 0.0 for t in rows), default=0.0)
    figure = len(f"{longest:.1f}")
    ran_as_other: dict[str, str] = {}
    for t in rows:
        env = _env_text({k: v for k, v in t["env"].items() if k not in shared}, "\n")
        qerr = max((v for v in (t["quant_error_fwd"], t["quant_error_bwd"]) if v is not None), default=None)
        precision = _pair(t["fwd_precision"], t["bwd_precision"])
        ran_as = _pair(t["effective_fwd_precision"], t["effective_bwd_precision"])
        if ran_as != precision:  # e.g. bf16 runs as fp16 on gloo: footnoted, the column stays narrow
            ran_as_other[precision] = ran_as
            precision += "*"
        speed = f"{t['samples_per_s']:,.0f}" if t["samples_per_s"] else t["state"]
        step = (
            Text(f"{t['iter_ms']:>{figure}.1f} ") + _step_bar(t.get("breakdown_ms"), longest)
            if t.get("iter_ms")
            else "-"
        )
        cells = [t["kind"], shown(precision), str(t["batch_size"]), *([t.get("pipeline") or "-"] if pipelines else []),
                 speed, step, f"{qerr:.1e}" if qerr is not None else "-"]  # fmt: skip
        table.add_row(*cells, env)
    console.print(table)
    console.print(
        f"step ms, bars to scale: [green]{BAR_COMPUTE}[/green] compute, [red]{BAR_EXPOSED}[/red] exposed comm"
    )
    if ran_as_other:
        console.print(
            shown("* ran as " + ", ".join(f"{ran} (asked {asked})" for asked, ran in ran_as_other.items()))
        )


BAR_WIDTH, BAR_COMPUTE, BAR_EXPOSED = 10, "█", "▒"


def _step_bar(parts: dict[str, float] | None, longest_ms: float) -> Text:
    """A step as a stacked bar to the scale of the slowest row: compute, then exposed comm."""
    if not parts or longest_ms <= 0:
        return Text("")
    compute = round(BAR_WIDTH * parts["compute"] / longest_ms)
    exposed = max(
        0,
        min(
            BAR_WIDTH - compute,
            round(BAR_WIDTH * (parts["compute"] + parts["exposed_comm"]) / longest_ms) - compute,
        ),
    )
    # padded to full width, so the step times in front of the bars line up
    pad = " " * (BAR_WIDTH - compute - exposed)
    return Text.assemble((BAR_COMPUTE * compute, "green"), (BAR_EXPOSED * exposed, "red"), pad)


def _env_text(env: dict[str, str], sep: str) -> str:
    return sep.join(f"{k.removeprefix('NCCL_')}={v}" for k, v in sorted(env.items())) or "-"


def _pair(fwd: str, bwd: str) -> str:
    """Forward/backward comm precision, once when they agree: "int8", "fp8/bf16"."""
    return fwd if fwd == bwd else f"{fwd}/{bwd}"


if __name__ == "__main__":
    sys.exit(main())
