"""Launchers: how a plan's stages are started where they run (`launcher: local | slurm`).

The package sits between `resolve` and `plan` (a layer of its own): it imports only `config`,
`resolve` and the shared bottom modules, so `plan` may size jobs with it (purely, on typed
inputs), and `run` may submit through it, handing in what only `run` knows as typed objects
(the MLflow parent, the command). Today it holds the SLURM cluster's reads (`slurm_cluster`:
the partition from `sinfo`, jobs' states from `sacct`) and the record of a submission
(`records`: a run's `jobs.json`); the sizing (`plan.jobs`) and the submission
(`run.scheduling`) are still to move behind one protocol (see tests/test_launcher_names.py).
"""
