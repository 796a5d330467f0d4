"""`torchrun ... tests/trials/hang_at_candidate.py --spec S --out R`: trials.run with the last rank
hanging in candidate HANG_AT (an out-of-memory error mid-step leaves its peers the same way: inside a
collective that never completes)."""

import os
import sys
import time

import trials.run
import trials.runner

HANG_AT = int(os.environ["HANG_AT"])
measure = trials.runner.TrialRunner._measure


def _measure(self, sw, cand):  # type: ignore[no-untyped-def]
    if self.current == HANG_AT and self.rank == self.world_size - 1:
        time.sleep(3600)
    return measure(self, sw, cand)


trials.runner.TrialRunner._measure = _measure  # type: ignore[method-assign]
code = trials.run.main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
