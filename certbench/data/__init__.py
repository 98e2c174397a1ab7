"""Test sets: where images come from, how they are read and written, and what they are called.

- :mod:`~certbench.data.sources`: ``load_images`` from the Hugging Face Hub, a local Hub-layout
  folder or a torchvision CIFAR folder; configs and their files;
- :mod:`~certbench.data.image_set`: ``ImageSet`` (uint8 images, labels, source indices) and
  ``Subset``; :mod:`~certbench.data.decoding`: Arrow rows into an ``ImageSet``;
- :mod:`~certbench.data.hub_datasets`, :mod:`~certbench.data.folders`,
  :mod:`~certbench.data.torchvision_cifar`: the three readers; :mod:`~certbench.data.writer`:
  the Hub layout writer; :mod:`~certbench.data.fetch`: local copies of pinned Hub datasets;
- :mod:`~certbench.data.names`, :mod:`~certbench.data.pins`: dataset names and the exact Hub
  revisions and bytes certbench reads; :mod:`~certbench.data.provenance`: publishable provenance;
  :mod:`~certbench.data.licenses`: the weights licences; :mod:`~certbench.data.demo`: the demo set.

Ground floor (imports no other certbench package). Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.data.demo import write_demo_dataset
    from certbench.data.fetch import (
        default_datasets_dir,
        definition_folder,
        fetch_dataset,
        hub_repo,
        mirror_path,
    )
    from certbench.data.folders import card_benchmark
    from certbench.data.image_set import ImageSet, Subset
    from certbench.data.licenses import WEIGHTS_LICENSES, UnknownLicenseError, canonical_license
    from certbench.data.names import alias_of, check_name
    from certbench.data.pins import default_revision
    from certbench.data.provenance import (
        LOCAL_KINDS,
        config_sha256,
        find_local_paths,
        public_name,
        public_source,
    )
    from certbench.data.sources import config_files, list_configs, load_images, source_kind

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
