"""Launchers: how a plan's stages are started where they run (`launcher: local | slurm`).

The package sits between `resolve` and `plan` (a layer of its own): it imports only `config`,
`resolve` and the shared bottom modules, so `plan` sizes jobs with it (purely, on typed
inputs: `kinds.StageNeeds`, a `kinds.Partition`), and `run` submits through it, handing in
what only `run` knows as typed objects and callables (`kinds.Submission`). `kinds` is the
protocol (`LauncherKind`) and the data launchers share; `registry` names them; `local` and
`slurm` implement it (`slurm_cluster`, `slurm_jobs`, `slurm_submit` are SLURM's reads, sizing
and submission); `records` is a submitted run's `jobs.json`. A third launcher is one module
here, one line in `registry`, its keys in `config.schema` and its config group.
"""
