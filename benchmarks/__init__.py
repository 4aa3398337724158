"""Side-by-side benchmark of Chord and humming-kernels 0.1.19 on Kimi K2.x MoE shapes.

Run it with ``bash benchmarks/run.sh`` on the H200 (see that script); every module here is also
runnable as ``python3 -m benchmarks.<module> --help`` from the repository root.

Process split (why the package is laid out this way): ``bench_chord`` imports ``chord_kernels``;
``bench_humming`` runs in its own process with humming-kernels on ``PYTHONPATH`` and must never
import ``chord_kernels`` (Chord's ``humming-compat`` package owns the same ``humming`` import name).
So everything both sides share (``scenarios``, ``common``, ``floors``) imports only torch and the
standard library.
"""
