"""certbench: certified-robustness benchmarks and leaderboard."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("certbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
