"""`python -m recipe_engine`: see `recipe_engine.cli.main`."""

import sys

from recipe_engine.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
