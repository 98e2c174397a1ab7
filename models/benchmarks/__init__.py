"""A benchmark's definition and its data: the schema of a definition file and where each test
set's images are read from on this deployment.

- :mod:`~models.benchmarks.definitions`: the definition file's schema (protocol, image sources,
  test sets, stage blocks) and its bounds;
- :mod:`~models.benchmarks.sources`: where a test set's images are read from (a folder, the local
  copy of a Hub data set, the Hub), its pins applied;
- :mod:`~models.benchmarks.folders`: a definition's local data folders checked: plain path
  segments that never leave ``CERTBENCH_DATASETS_DIR`` (absolute ones only from the service
  machine);
- :mod:`~models.benchmarks.limits`: a benchmark's caps on a submitted network's parameters and
  FLOPs per sample, checked at intake on the ``meta`` device;
- :mod:`~models.benchmarks.data_pins`: the exact bytes a definition pins (revision, SHA-256);
- :mod:`~models.benchmarks.content_hashes`: content hashes of local copies, computed once;
- :mod:`~models.benchmarks.availability`: is a benchmark's data on this machine, decided in
  milliseconds without the network;
- :mod:`~models.benchmarks.generated`: data sets the service builds itself where missing.

Below the stages, which read definitions' blocks and load images through it; loading definitions
into the database, which validates the stage blocks, is :mod:`models.catalog`.
"""
