"""Helpers shared by the tests: factories, data layouts, processes, stacks and seeds.

Imported as ``tests.support.<module>`` (the repository root is on ``sys.path``, pyproject's
``[tool.pytest.ini_options] pythonpath``), never as top-level modules, so any subset of test
files from any folders runs in one pytest process.
"""
