#!/usr/bin/env bash
# The wgmma k-loop probe (run_probe.sh mainloop): bash benchmarks/probes/run_mainloop.sh [probe args]
exec bash "$(dirname "$0")/run_probe.sh" mainloop "$@"
