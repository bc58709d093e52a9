"""Development scripts around the engine, outside the package and not in the wheel: benchmarks,
the GPU check and report, the docs' regenerated tables, and `make install`'s dev steps (the
cache warm-up, DeepSpeed's CPU op). Run from the checkout's root, `python -m tools.NAME` (the
Makefile's targets do); they import the engine as any user of it does."""
