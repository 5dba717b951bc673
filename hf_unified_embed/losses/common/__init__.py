"""Helpers shared by several loss classes: input checks, citations, gathering across devices,
intermediate-layer embeddings, identical-text detection, and the bases of the pair-score and
teacher-score losses."""
