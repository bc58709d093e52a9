"""Resolve: a composed config's inputs made concrete, once, before anything is decided.

Every read of a file, the hub, the store or the machine happens here (model folders, GGUF
conversion, tiny built-in models, hub revisions, data rows, chat templates, the GPUs), and
every cache is keyed by the content of what was read. `plan` decides on what this yields.
"""
