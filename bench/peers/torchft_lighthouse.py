#!/usr/bin/env python3
"""torchft's lighthouse (the quorum server of bench/peers/torchft_diloco.py) until SIGTERM.

    .venv/bin/python bench/peers/torchft_lighthouse.py --bind 0.0.0.0:29510 --min-replicas 4
"""

import argparse
import signal
import time

from torchft._torchft import LighthouseServer


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bind", default="0.0.0.0:29510")
    p.add_argument("--min-replicas", type=int, required=True)
    args = p.parse_args()
    server = LighthouseServer(bind=args.bind, min_replicas=args.min_replicas)
    print(f"lighthouse at {server.address()}", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        time.sleep(0.2)
    server.shutdown()


if __name__ == "__main__":
    main()
