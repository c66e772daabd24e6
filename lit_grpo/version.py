"""The package's version, apart from ``lit_grpo/__init__.py`` (which imports torch and Lightning for its
public names), so that any module, and pyproject.toml's build, reads it without loading the package."""

__version__ = "0.2.0"
