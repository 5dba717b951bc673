"""Built-in source adapters, one module per family of formats.

Every module in this package is imported when the registry is first used, so a new format is one
new module here whose adapter is decorated with
:func:`hf_unified_embed.data.source_formats.register_source_format`.
"""
