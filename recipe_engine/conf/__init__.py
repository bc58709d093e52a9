"""The shipped Hydra configs (config.yaml and its groups); a package so Hydra reads them as
`pkg://recipe_engine.conf` from wherever recipe_engine is installed."""
