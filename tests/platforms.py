"""Platforms the comparison tests compare, described rather than measured."""

from dataclasses import replace

from recipe_engine.store.records import Platform

XEON = Platform(
    device="cpu",
    cpu="Intel(R) Xeon(R) Platinum 8480+",
    cpu_capability="AVX512",
    threads=4,
    python="3.11.7",
    libraries={"torch": "2.14.1", "transformers": "5.23.0", "trl": "1.16.0", "peft": "0.21.2"},
)
# The same libraries on an AVX2 machine with fewer threads: results may differ.
EPYC = replace(XEON, cpu="AMD EPYC", cpu_capability="AVX2", threads=2)
H100 = replace(XEON, device="cuda", gpu="NVIDIA H100 80GB HBM3", gpu_capability="9.0")
