"""The benchmarks this service offers: versioned definition files loaded into the database.

- :mod:`~models.catalog.benchmarks`: loading, validating (each stage block against its stage's
  protocol model) and listing benchmark definitions;
- :mod:`~models.catalog.pins`: ``certbench benchmarks pin``, the published bytes written into a
  definition;
- :mod:`~models.catalog.reference_entries`: the reference entries shipped with a benchmark.

Data: ``definitions/*.json`` (the packaged definitions) and ``demo_assets/`` (the demo
benchmark's reference models). Above :mod:`models.stages`, whose registry validates the blocks.
"""
