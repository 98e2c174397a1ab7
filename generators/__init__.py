"""Dataset generators (CIFAR-F, corruption benchmarks) and the Hugging Face Hub layout they share.

Layering: generators import certbench, never the reverse.
"""
