"""GLUE tasks and data readers (see ``tasks`` and ``readers``)."""

from compressor.core.data.readers import (
    Dataset,
    Example,
    embedded_dir,
    load_split,
    read_glue_file,
    read_user_file,
    resolve_data_dir,
)
from compressor.core.data.tasks import TASKS, TaskSpec, custom_task, get_task
from compressor.core.data.unlabelled import unlabelled_text
from compressor.core.data.userfiles import (
    UserData,
    data_for,
    data_meta,
    load_data,
    load_for_model,
    recorded_data,
    task_from_dict,
    task_to_dict,
)

__all__ = [
    "TASKS", "Dataset", "Example", "TaskSpec", "custom_task", "embedded_dir", "get_task",
    "load_split", "read_glue_file", "read_user_file", "resolve_data_dir", "UserData",
    "load_data", "task_from_dict", "task_to_dict", "unlabelled_text", "data_for", "data_meta",
    "load_for_model", "recorded_data",
]
