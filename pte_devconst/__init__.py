"""pte-devconst: move constants that only device delegates read into device memory, in existing .pte files."""

__version__ = "0.1.0"
