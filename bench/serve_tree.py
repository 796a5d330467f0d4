"""Serve the checkout in the working directory, for `python -m bench.serving --against REF`.

Run as a file (`python bench/serve_tree.py`) with the checkout to serve as the working directory, so
that every import below, and the `autotuner serve` it starts, is that checkout's code, whichever
commit it is. It publishes the demo config through that checkout's own test helpers, prints the
config URL on one line, and serves until its stdin closes.
"""

import os
import sys
import tempfile
from pathlib import Path


def main() -> None:
    sys.path[0] = os.getcwd()  # the checkout being measured, not the one this file came from
    try:
        from tests.api.service import make_server, replay_study_body, wait_for_config, wait_for_state
    except ModuleNotFoundError:  # a checkout from before tests/api/service.py (the --against side)
        from tests.api.conftest import (  # noqa: TID251
            make_server,
            replay_study_body,
            wait_for_config,
            wait_for_state,
        )

    with tempfile.TemporaryDirectory(prefix="bench-serve-tree-") as tmp:
        server = make_server(Path(tmp))
        server.start()
        try:
            client = server.client("write")
            study = client.post("/v1/studies", json=replay_study_body("publish")).json()
            wait_for_state(client, study["id"], ("done",))
            if wait_for_config(client, timeout_s=60).status_code != 200:
                raise SystemExit(f"{os.getcwd()}: the demo study published no config")
            print(f"{server.url}/v1/configs/cpu-box/small", flush=True)
            sys.stdin.read()
        finally:
            server.kill()


if __name__ == "__main__":
    main()
