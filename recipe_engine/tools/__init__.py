"""Tools around the engine, outside its layers: benchmarks, the GPU check, the install warm-up."""
