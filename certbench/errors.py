"""One catchable hierarchy for every error a user can fix.

Messages name the argument, the bad value and the fix; callers chain the original
exception with ``raise ... from err`` so nothing is swallowed.
"""


class CertbenchError(Exception):
    """Base class: a bad input or environment the user can correct."""


class ModelLoadError(CertbenchError):
    """The submitted model (manifest, weights, architecture) cannot be used."""


class UnknownArchitectureError(ModelLoadError):
    """The architecture name is not in the registry."""


class ManifestError(ModelLoadError):
    """The manifest is malformed or contradicts the weights or the command line."""


class WeightsFormatError(ModelLoadError):
    """The weights file is not a readable safetensors file."""


class TruncatedWeightsError(WeightsFormatError):
    """The safetensors header describes more bytes than the file holds (an upload cut short)."""


class WeightsHeaderTooLargeError(WeightsFormatError):
    """The safetensors header is larger, or lists more tensors, than the architecture needs."""


class DuplicateTensorError(WeightsFormatError):
    """The safetensors header names a tensor twice (JSON readers keep one of the two)."""


class PreprocessingError(ManifestError):
    """The manifest's mean/std cannot normalise float32 inputs (std that rounds to zero or a
    subnormal float32, a value beyond float32's range)."""


class NonFiniteWeightsError(ModelLoadError):
    """A weight tensor holds NaN or ±inf values."""


class StateDictMismatchError(ModelLoadError):
    """Missing/unexpected keys or shape mismatches between weights and architecture."""


class InputSizeError(ModelLoadError):
    """The model cannot take inputs of the declared size."""


class ModelOutputError(ModelLoadError):
    """The model's output has the wrong number of classes or is not finite."""


class NonFiniteOutputError(ModelOutputError):
    """The model's outputs contain NaN or inf."""


class DataSourceError(CertbenchError):
    """A dataset source is missing, unreadable or has the wrong shape."""


class DataUnavailableError(DataSourceError):
    """The data is not reachable from here: a local path that does not exist, or a Hub dataset
    that cannot be reached or found.

    The message (``str``) ends with advice for the person at the command line; ``problem`` is
    what failed without that advice, so that a service can give its operators their own fix
    (``models.stages.inputs``). ``source`` is the Hub id (``hub``) or the local path given.
    """

    def __init__(self, problem: str, *, advice: str, source: str, hub: bool) -> None:
        super().__init__(f"{problem}; {advice}" if advice else problem)
        self.problem = problem
        self.source = source
        self.hub = hub


class CertificationError(CertbenchError):
    """Arguments to certify/predict are inconsistent (shapes, labels, n, alpha, sigma)."""


class SensitivityError(CertbenchError):
    """Fourier-sensitivity arguments are invalid (grid point, stride, protocol, records)."""


class RecordsError(CertbenchError):
    """A records file is missing columns or cannot be used for the requested metric."""


class ThreatModelError(CertbenchError):
    """Anchor banks, PD-threat inputs or attack arguments are missing or inconsistent."""


class GeneratorError(CertbenchError):
    """Dataset-generation arguments are invalid (unknown alpha/f_c/severity, bad output folder)."""


class PublishError(CertbenchError):
    """Publishing a dataset folder to the Hugging Face Hub failed (network, auth, bad layout)."""


class LensError(CertbenchError):
    """Fourier-lens arguments (protocol, path ranges, preprocessing, records) are inconsistent."""


class EffectiveRobustnessError(CertbenchError):
    """Effective-robustness inputs cannot be fitted (too few entries, mixed σ, bad counts)."""


class AugmentationError(CertbenchError):
    """Augmentation inputs or hyper-parameters are invalid (dtype, shape, seeds, severities)."""


class TrainingError(CertbenchError):
    """Training arguments, data or checkpoints are invalid or inconsistent."""
