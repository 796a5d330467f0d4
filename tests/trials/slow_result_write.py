"""`torchrun ... tests/trials/slow_result_write.py --spec S --out R`: trials.run with rank 0 taking
WRITE_DELAY_S seconds to write its result (a slow shared disk, a big result), while the other ranks
are done."""

import os
import sys
import time

import trials.run

write = trials.run.write_json_atomic


def slow_write(path, data):  # type: ignore[no-untyped-def]
    if os.environ.get("RANK") == "0":
        time.sleep(float(os.environ["WRITE_DELAY_S"]))
    write(path, data)


trials.run.write_json_atomic = slow_write
code = trials.run.main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
