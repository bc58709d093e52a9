"""Formats the engine carries beside its registry's (`resolve.formats.REGISTRY`), each a module
with one `FORMAT` (a `resolve.formats.DataFormat`): the shape a plug-in's format takes
(`plugins`), so adding one is adding its module here, or in a package of your own."""
