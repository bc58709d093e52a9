"""`recipe-engine ui`: a read-only local web view of what the engine wrote under output_root.

It reads records only (store/, report/ readers; no torch, nothing trained, written or deleted)
and serves pages over Starlette, run by uvicorn (`ui.server`).
"""
