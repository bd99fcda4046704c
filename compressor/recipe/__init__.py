"""Recipes: a teacher, a task, data and an ordered list of compression stages."""
from .registry import STAGES, StageType, all_stages, get_stage, register_stage
from .runner import StageContext, run_recipe
from .schema import Recipe, RecipeError, load_recipe, recipe_from_text, validate_recipe

__all__ = ["STAGES", "StageType", "all_stages", "get_stage", "register_stage", "StageContext",
           "run_recipe", "Recipe", "RecipeError", "load_recipe", "recipe_from_text",
           "validate_recipe"]
