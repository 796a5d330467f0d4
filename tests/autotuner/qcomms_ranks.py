"""One rank of tests/autotuner/test_qcomms_ranks.py, under torchrun on gloo: for each case, this rank's
AUTOTUNER_* environment (argv[1]: JSON, a list of cases, each a list of one environment per rank) is
set, `tuned()` read three times (only the first compares across ranks; the third, on rank 1, from another
environment), and what each read adopted printed as one JSON line on stdout."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from datetime import timedelta

import torch.distributed as dist

from autotuner.job import qcomms
from autotuner.job.qcomms import tuned


def main() -> None:
    cases = json.loads(sys.argv[1])
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))  # a rank left waiting fails, not hangs
    rank = dist.get_rank()
    for case, environments in enumerate(cases):
        qcomms._agreement = None  # each case as a new job: ranks agree once a process
        for name in [n for n in os.environ if n.startswith("AUTOTUNER_")]:
            del os.environ[name]
        os.environ.update(environments[rank])
        first, again = tuned(), tuned()
        later = tuned(
            {} if rank == 1 else None
        )  # read otherwise on one rank only: nothing compared, no change
        reads = {"tuned": asdict(first), "again": asdict(again), "later": asdict(later)}
        sys.stdout.write(json.dumps({"case": case, "rank": rank, **reads}) + "\n")  # one write: lines whole
        sys.stdout.flush()
    # Then a script that reads the config on rank 0 only: rank 0 waits for rank 1 a while, then keeps
    # the job's own settings (a collective would have hung it); rank 1 never reads it.
    qcomms._agreement, qcomms.AGREE_TIMEOUT_S = None, 3.0
    if rank == 0:
        os.environ.update(cases[0][0])
        sys.stdout.write(json.dumps({"case": "alone", "rank": 0, "tuned": asdict(tuned())}) + "\n")
        sys.stdout.flush()
    dist.barrier()
    if rank == 1:  # and reads it after: the decision stands for it too (it adopted v3, rank 0 nothing)
        os.environ.update(cases[0][1])
        sys.stdout.write(json.dumps({"case": "alone", "rank": 1, "tuned": asdict(tuned())}) + "\n")
        sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
