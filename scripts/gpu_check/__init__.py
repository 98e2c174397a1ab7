"""``scripts/gpu-check``: one prepared run of everything a lent GPU should measure (issue 28).

Modules: :mod:`.roofline` (device peaks, FLOPs and bytes per sample), :mod:`.certification`
(certify throughput: precisions, compile, batch sweep, the reference loop), :mod:`.stages`
(per-image cost of each stage's computation, training images/s per recipe), :mod:`.report`
(JSON and markdown), :mod:`.main` (the command: wheels, CUDA tests, budget, sections).
Imports only what the GPU image has (``tests/cuda/test_cuda_imports.py`` checks it in CI).
"""
