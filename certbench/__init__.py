"""certbench: certified-robustness benchmarks and leaderboard."""
