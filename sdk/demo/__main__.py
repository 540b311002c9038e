"""``python -m eosink.demo [job|pipeline|demo] ...``: the drivers the demo and the tests start."""

from __future__ import annotations

import sys

from eosink.cli import exit_on_sigterm
from eosink.demo import demo_main, job_main
from eosink.demo.pipeline import main as pipeline_main


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["job"]:
        return job_main(argv[1:])
    if argv[:1] == ["pipeline"]:
        return pipeline_main(argv[1:])
    exit_on_sigterm()
    return demo_main(argv[1:] if argv[:1] == ["demo"] else argv)


if __name__ == "__main__":
    sys.exit(main())
