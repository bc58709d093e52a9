"""`python -m recipe_engine`: see `recipe_engine.cli.main`."""

import sys

from recipe_engine.cli.main import console

if __name__ == "__main__":
    sys.exit(console())
