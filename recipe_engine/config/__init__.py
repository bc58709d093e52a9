# `${package_dir:...}` and any other resolver recipes use: registered in every process that
# imports the config layer (sweep workers unpickle a task that imports it, too).
from recipe_engine.config.resolvers import register_resolvers

register_resolvers()
