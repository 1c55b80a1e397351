"""Code generated from schema/fbs by schema/regenerate.py: the model, its decoder, encoder and counts."""
