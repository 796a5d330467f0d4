"""`torchrun ... tests/trials/fault_at_candidate.py --spec S --out R`: trials.run with the last rank
failing as FAULT says, after touching FAULT_MARK (when set) so a test can wait for the moment:

- `exit`: it dies (as the kernel's OOM killer ends it) in its first step of candidate FAULT_AT;
- `hang`: it hangs in candidate FAULT_AT (its peers wait inside a collective);
- `build`: its FAULT_AT-th sharding of the tables (0: the first) raises, as an allocation that fails on
  the rank holding the big table does, while its peers shard theirs (past DistributedModelParallel's
  first collective, where memory runs out);
- `write`: rank 0's result cannot be written (a full disk), after every candidate was measured.

With FAULT_MARK set, rank 0 also writes its process id to FAULT_MARK.pid0 as it starts."""

import os
import sys
import time
from pathlib import Path

from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

import trials.run
import trials.runner

FAULT, AT = os.environ["FAULT"], int(os.environ["FAULT_AT"])
LAST = int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1
measure, shard = trials.runner.TrialRunner._measure, EmbeddingBagCollectionSharder.shard
builds = [0]


def fault() -> None:
    if mark := os.environ.get("FAULT_MARK"):
        Path(mark).write_text(FAULT)
    if FAULT == "exit":
        os._exit(137)
    while FAULT == "hang":
        time.sleep(3600)


def _measure(self, sw, cand):  # type: ignore[no-untyped-def]
    if LAST and self.current == AT and FAULT in ("exit", "hang"):
        fault()
    return measure(self, sw, cand)


def _shard(*args, **kwargs):  # type: ignore[no-untyped-def]
    builds[0] += 1
    if LAST and FAULT == "build" and builds[0] - 1 == AT:
        fault()
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory (injected)")
    return shard(*args, **kwargs)


def _no_space(path, data):  # type: ignore[no-untyped-def]
    raise OSError(28, "No space left on device")


if os.environ["RANK"] == "0" and (mark := os.environ.get("FAULT_MARK")):
    Path(f"{mark}.pid0").write_text(str(os.getpid()))
if FAULT == "write":
    trials.run.write_json_atomic = _no_space
trials.runner.TrialRunner._measure = _measure  # type: ignore[method-assign]
EmbeddingBagCollectionSharder.shard = _shard  # type: ignore[method-assign]
code = trials.run.main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
