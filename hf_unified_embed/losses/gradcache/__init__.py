"""The GradCache machinery behind every loss's ``mini_batch_size`` / ``mini_batch_num_tokens`` option.

``minibatches`` cuts a batch into mini-batches (rows or a token budget, over length-sorted rows),
``auto_mini_batch`` sizes ``"auto"`` mini-batches to memory, and ``cached_loss`` runs the two-pass
GradCache step on top of a loss's ``embed`` / ``compute_loss_from_embeddings`` split. These modules
depend on the loss classes only through the :class:`~hf_unified_embed.losses.gradcache.cached_loss.CachedLoss`
protocol, so the loss base class can import them without a cycle.
"""
