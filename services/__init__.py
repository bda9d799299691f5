"""rote's services (one package each) and the shared kernel they stand on."""

__version__ = "0.1.0"
