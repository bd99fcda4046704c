"""Recipe stages of this package (registered with ``compressor.recipe.registry.register_stage``)."""
