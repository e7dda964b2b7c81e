"""Decontamination: renamed and resized copies of evaluation tasks are caught, a different task is not."""

from __future__ import annotations

import json

import pytest

from kernelsmith.synth import decontaminate, rubric
from kernelsmith.synth.compose import CombinatorialComposer

from synth_tasks import DIFFERENT, EVAL_TASKS, RENAMED_RESIZED, write_tasks


@pytest.fixture(scope="module")
def eval_set(tmp_path_factory) -> decontaminate.EvalSet:
    folder = tmp_path_factory.mktemp("kernelbench")
    write_tasks(folder, EVAL_TASKS)
    graphs = rubric.capture_graphs(folder)  # in a jailed worker, as synth captures an evaluation set
    assert sorted(graphs) == sorted(EVAL_TASKS) and not any("error" in g for g in graphs.values())
    return decontaminate.EvalSet(decontaminate.graphs_from_json(json.dumps(graphs)))


@pytest.mark.parametrize("name", list(RENAMED_RESIZED))
def test_a_renamed_and_resized_copy_is_caught_and_named(eval_set, name):
    nearest, score = eval_set.nearest(decontaminate.capture_source(RENAMED_RESIZED[name]))
    assert nearest == name and score >= decontaminate.DEFAULT_THRESHOLD


def test_a_genuinely_different_task_is_kept(eval_set):
    nearest, score = eval_set.nearest(decontaminate.capture_source(DIFFERENT))
    assert nearest is not None and score < decontaminate.DEFAULT_THRESHOLD


def test_a_composed_task_with_the_structure_of_an_evaluation_task_is_caught(eval_set):
    """A composition that happens to be conv -> relu -> bias add is the evaluation task, whatever its sizes."""
    composed = next(c for c in CombinatorialComposer(0, 5, "cpu").candidates() if c.info["ops"][0] == "conv2d")
    source = composed.source.replace(composed.source[composed.source.index("    def forward"):
                                                      composed.source.index("\n\n\ndef get_inputs")],
                                     "    def forward(self, x0):\n        return torch.relu(self.conv2d1(x0)) + 1.0")
    nearest, score = eval_set.nearest(decontaminate.capture_source(source))
    assert nearest == "level2/1_Conv2D_ReLU_BiasAdd.py" and score >= decontaminate.DEFAULT_THRESHOLD


def test_names_sizes_and_views_do_not_change_the_graph():
    small = decontaminate.capture_source(EVAL_TASKS["level2/9_Gemm_Scale_Softmax_Sum.py"]).features()
    big = decontaminate.capture_source(EVAL_TASKS["level2/9_Gemm_Scale_Softmax_Sum.py"]
                                       .replace("batch_size = 128", "batch_size = 4096")).features()
    assert small == big and decontaminate.similarity(small, big) == 1.0
