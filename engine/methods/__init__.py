"""One module per paper (``<slug>.py``) plus helper methods; registered via ``studio.methods``."""
