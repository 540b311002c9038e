"""The Spark streaming driver the kill-and-restart tests run: the demo's job (eosink.demo.job_main)."""

import sys

from eosink.demo import job_main

if __name__ == "__main__":
    sys.exit(job_main())
