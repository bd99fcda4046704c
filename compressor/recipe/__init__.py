"""Recipes: a teacher, a task, data and an ordered list of compression stages."""
from compressor.core.registry import STAGES, StageType, all_stages, get_stage, register_stage
from compressor.recipe.runner import StageContext, run_recipe
from compressor.recipe.schema import Recipe, RecipeError, load_recipe, recipe_from_text, validate_recipe

__all__ = ["STAGES", "StageType", "all_stages", "get_stage", "register_stage", "StageContext",
           "run_recipe", "Recipe", "RecipeError", "load_recipe", "recipe_from_text",
           "validate_recipe"]
