"""The default recipe shipped inside the package, for ``compressor demo``."""
import os


def demo_recipe_path() -> str:
    return os.path.join(os.path.dirname(__file__), "demo.yaml")
