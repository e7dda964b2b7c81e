"""`kernelsmith train verl` under the real verl (0.9.1, installed without its GPU stack: .ci/run): the plugin
imports and registers; the generated configuration composes with verl's own defaults and passes verl's checks,
and an unknown key fails; the dataset rows round-trip and verl's RLHFDataset reads them; bad input is one line
and exit 2; and KernelAgentLoop, instantiated from the generated agent-loop file as verl's worker does, plays a
real KernelEnv session on the CPU against a fake server manager (verl's `generate` signature, a scripted
policy's token ids): a verified kernel is the ledger's reward 1, with tool outputs masked out; a crash is a
failed sample with reward 0."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("hydra", reason="verl's config system (hydra-core) is not installed: pip install 'kernelsmith[scale]'")
pytest.importorskip("verl.experimental.agent_loop.agent_loop",
                    reason="verl cannot be imported here: pip install 'kernelsmith[scale]' (CI: .ci/run)")

import yaml  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from kernelsmith.errors import BadInput  # noqa: E402
from kernelsmith.train.verl import AGENT_NAME, config, data  # noqa: E402
from tinymodels import CHATML, CORPUS, build_tokenizer, tiny_llama  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "triple_session"
TASK = DATA / "triple.py"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny checkpoint whose ChatML-with-tools tokenizer knows the prompts (the policy verl would serve)."""
    corpus = CORPUS + [p.read_text() for p in (ROOT / "prompts").glob("*.md")] + [(ROOT / "skills" / "cpu" / "SKILL.md").read_text()]
    folder = build_tokenizer(tmp_path_factory.mktemp("policy"), CHATML, corpus, vocab_size=3000)
    return tiny_llama(folder, vocab_size=3000)


def plan_for(model: Path, out: Path, **kw) -> config.VerlPlan:
    settings = {"batch_size": 1, "samples": 8, "gpus_per_node": 8, "prompt_length": 65536,
                "response_length": 16384, **kw}
    return config.VerlPlan(tasks=[TASK], model=str(model), out=out, **settings)


@pytest.fixture(scope="module")
def written(model, tmp_path_factory) -> config.VerlPlan:
    plan = plan_for(model, tmp_path_factory.mktemp("verl") / "run", device="cpu", sandbox="local")
    plan.done = config.run(plan)
    return plan


def test_the_plugin_imports_registers_and_its_reward_function_loads_as_verl_loads_it():
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, _agent_loop_registry
    from verl.utils.import_utils import load_extern_object

    from kernelsmith.train.verl.agent_loop import KernelAgentLoop

    assert issubclass(KernelAgentLoop, AgentLoopBase)
    assert _agent_loop_registry[AGENT_NAME] == {"_target_": config.LOOP_TARGET}
    score = load_extern_object(config.REWARD_MODULE, "compute_score")
    assert score(extra_info={"kernelsmith": {"reward": 2.0, "error": ""}})["score"] == 2.0
    assert score(extra_info={"kernelsmith": {"reward": 3.0, "error": "crashed"}})["score"] == 0.0  # failed sample
    assert score(extra_info={})["score"] == 0.0


def test_the_generated_config_composes_with_verls_defaults_and_passes_its_checks(written):
    assert written.done["validated"] == ["AlgoConfig", "FSDPActorConfig", "RolloutConfig", "FSDPCriticConfig",
                                         "HFModelConfig"]
    composed = config.compose(written.out)
    algo, actor, rollout = composed.algorithm, composed.actor_rollout_ref.actor, composed.actor_rollout_ref.rollout
    assert (algo.adv_estimator, algo.gamma, algo.lam) == ("gae", 1.0, 0.95)
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert actor.use_kl_loss and actor.kl_loss_type == "low_var_kl"
    assert rollout.multi_turn.enable and rollout.agent.default_agent_loop == AGENT_NAME
    assert rollout.response_length == 16384 and composed.trainer.total_training_steps == 100
    assert composed.reward.custom_reward_function.path == config.REWARD_MODULE
    assert composed.critic.model.path == str(written.model)  # verl's critic starts from the policy
    assert composed.actor_rollout_ref.ref.strategy == "fsdp"  # verl's defaults are there beneath ours
    launch = (written.out / "launch.sh").read_text()
    assert f"-m verl.trainer.main_ppo --config-path {written.out} --config-name verl" in launch
    assert os.access(written.out / "launch.sh", os.X_OK) and "ray job submit" in written.done["launch"]


def test_an_unknown_key_fails_validation(written, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("agent_loop.yaml",):
        (bad / name).write_text((written.out / name).read_text())
    settings = yaml.safe_load((written.out / "verl.yaml").read_text())
    settings["actor_rollout_ref"]["actor"]["clip_ratio_hihg"] = 0.3  # a typo Hydra alone would add silently
    (bad / "verl.yaml").write_text(yaml.safe_dump(settings))
    with pytest.raises(BadInput, match="unknown key actor_rollout_ref.actor.clip_ratio_hihg"):
        config.validate(bad)
    settings["actor_rollout_ref"]["actor"].pop("clip_ratio_hihg")
    settings["actor_rollout_ref"]["rollout"]["agent"]["agent_loop_config_path"] = str(bad / "agent_loop.yaml")
    settings["actor_rollout_ref"]["model"]["path"] = settings["critic"]["model"]["path"] = "org/only-on-the-cluster"
    (bad / "verl.yaml").write_text(yaml.safe_dump(settings))
    # without the typo it passes, and a model path that exists only on the cluster is never loaded (--remote-model)
    assert config.validate(bad, local_model=False) == ["AlgoConfig", "FSDPActorConfig", "RolloutConfig",
                                                         "FSDPCriticConfig"]
    loops = yaml.safe_load((bad / "agent_loop.yaml").read_text())
    loops[0]["max_turn"] = 3
    (bad / "agent_loop.yaml").write_text(yaml.safe_dump(loops))
    with pytest.raises(BadInput, match="unknown options: max_turn"):
        config.validate(bad, local_model=False)


def test_the_dataset_rows_round_trip_and_verls_dataset_reads_them(written, model):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    rows = data.read_parquet(written.out / "data" / "train.parquet")
    assert rows == data.task_rows([TASK], "train")
    extra = rows[0]["extra_info"]
    assert rows[0]["agent_name"] == AGENT_NAME and extra["task_source"] == TASK.read_text()
    assert extra["task_path"] == str(TASK.resolve()) and extra["task_name"] == "triple"
    tokenizer = __import__("transformers").AutoTokenizer.from_pretrained(str(model))
    dataset_config = OmegaConf.merge(config.compose(written.out).data, {"dataloader_num_workers": 0})
    item = RLHFDataset(str(written.out / "data" / "train.parquet"), tokenizer, dataset_config)[0]
    assert item["agent_name"] == AGENT_NAME and item["extra_info"]["task_source"] == TASK.read_text()
    assert item["raw_prompt"][0]["role"] == "user"


def ks(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys\nfor name in sys.argv[1].split():\n    sys.modules[name] = None"
                           "\nfrom kernelsmith.cli import main\nsys.exit(main(sys.argv[2:]))", env.get("hide", ""),
                           "train", "verl", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case, hide, message", [
    ("no tasks", "", "no task files found"),
    ("missing model", "", "no model checkpoint in"),
    ("batch over tasks", "", "--batch-size 8 must be between 1 and the number of tasks"),
    ("verl missing", "verl", "validating the configuration needs verl"),
])
def test_bad_input_is_one_line_and_exit_2(case, hide, message, model, tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    if case != "no tasks":
        (tasks / "triple.py").write_text(TASK.read_text())
    chosen = tmp_path / "absent" if case == "missing model" else model
    batch = ["--batch-size", "8"] if case == "batch over tasks" else ["--batch-size", "1", "--samples", "8"]
    proc = ks("--tasks", str(tasks), "--model", str(chosen), "--out", str(tmp_path / "out"), *batch, hide=hide)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "verl.yaml").exists()


# -- the agent loop, end to end on the CPU ----------------------------------------------------------

class FakeServer:
    """verl's server manager as the agent loop calls it (`generate(request_id, *, prompt_ids, sampling_params)`,
    a TokenOutput back): each call answers the next scripted reply's token ids, cut at max_tokens."""

    def __init__(self, tokenizer, replies: list[str]):
        self.tokenizer, self.replies, self.calls = tokenizer, list(replies), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "params": dict(sampling_params)})
        text = self.replies.pop(0) if self.replies else "Done."
        ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)[:sampling_params["max_tokens"]]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


class BrokenServer(FakeServer):
    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        if len(self.calls) == 1:
            raise ConnectionError("the rollout server went away")
        return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


# the workdir's worked example is a light-binding kernel computing alpha * x: with alpha 3 it is the task, and it
# builds in seconds even where no precompiled torch header exists yet (a fresh CI machine)
MODEL_NEW = """from kernelsmith.ext import load_kernels
from model import Model

ext = load_kernels()


class ModelNew(Model):
    def forward(self, x):
        return ext.example_scale(x, 3.0, 0)
"""
SCRIPT = [
    "The worked example scales by alpha: with 3 it is the task." + call("write_file", path="model_new.py",
                                                                        content=MODEL_NEW) + call("verify"),
    "It verified." + call("finish", summary="the example kernel with alpha 3"),
]


def agent_loop(plan: config.VerlPlan, tokenizer, server, overrides: dict | None = None):
    """KernelAgentLoop as verl's AgentLoopWorker makes it: the registry entry from the agent-loop file, through
    hydra.utils.instantiate, with the trainer's composed configuration (and these dotted overrides)."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    composed = config.compose(plan.out)
    for key, value in (overrides or {}).items():
        OmegaConf.update(composed, key, value)
    (entry,) = [e for e in OmegaConf.load(plan.out / config.AGENT_LOOP_FILE) if e.name == AGENT_NAME]
    return hydra.utils.instantiate(entry, trainer_config=DictConfigWrap(composed), server_manager=server,
                                   tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=RLHFDataset,
                                   data_config=DictConfigWrap(composed.data), tools=ToolListWrap([]))


@pytest.fixture
def loop_plan(written, tmp_path) -> config.VerlPlan:
    """The written run, its agent-loop options pointed at this test's folder (the workdirs kept to look at)."""
    entries = yaml.safe_load((written.out / config.AGENT_LOOP_FILE).read_text())
    entries[0].update(workdir_root=str(tmp_path / "root"), warm_baselines=False, keep_workdirs=True)
    (written.out / config.AGENT_LOOP_FILE).write_text(yaml.safe_dump(entries))
    return written


def play(plan, tokenizer, server, overrides: dict | None = None):
    row = data.read_parquet(plan.out / "data" / "train.parquet")[0]

    async def go():
        loop = agent_loop(plan, tokenizer, server, overrides)
        return await loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True}, raw_prompt=row["prompt"],
                              extra_info=row["extra_info"], index=0, data_source=row["data_source"])

    return asyncio.run(go())


def spans(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) runs of the mask."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


def test_the_agent_loop_plays_a_real_session_and_returns_the_ledgers_reward(loop_plan, model):
    from kernelsmith.session.reader import read_events, session_paths

    tokenizer = __import__("transformers").AutoTokenizer.from_pretrained(str(model))
    server = FakeServer(tokenizer, SCRIPT)
    out = play(loop_plan, tokenizer, server)
    outcome = out.extra_fields["kernelsmith"]
    assert not outcome["error"], outcome
    assert out.reward_score == 1.0 == outcome["reward"] == outcome["env_final_reward"]  # a verified kernel
    assert outcome["reason"] == "finish" and outcome["best"]["sha"] and out.extra_fields["turn_scores"] == [1.0]
    assert out.extra_fields["reward_extra_info"] == {"kernelsmith_reward": 1.0, "verified": 1.0, "failed": 0.0}

    # the first prompt is the session's own: the env's system and task prompts, its tools, the chat template
    first = server.calls[0]["prompt_ids"]
    assert first == out.prompt_ids and "kernels/example_scale.cpp" in tokenizer.decode(first)
    assert tokenizer.decode(first).endswith("<|im_start|>assistant\n") and '"name": "verify"' in tokenizer.decode(first)
    assert "Optimisation playbook" in tokenizer.decode(first)  # the whole guide: the window holds it
    # the response: policy tokens (mask 1) exactly as generated, then the tool outputs (mask 0), then the last turn
    runs = spans(out.response_mask)
    assert [v for v, _, _ in runs] == [1, 0, 1], runs
    policy = [tokenizer.decode(out.response_ids[s:e]) for v, s, e in runs if v]
    assert policy == [SCRIPT[0] + "<|im_end|>", SCRIPT[1] + "<|im_end|>"]
    tools = tokenizer.decode(out.response_ids[runs[1][1]:runs[1][2]])
    assert tools.count("<|im_start|>tool\n") == 2 and "[budget] turn 1 of 150" in tools
    assert tools.rstrip().endswith("<|im_start|>assistant")  # the generation prompt of turn 2, masked too
    assert server.calls[1]["prompt_ids"] == out.prompt_ids + out.response_ids[:runs[1][2]]
    assert len(out.response_logprobs) == len(out.response_ids) and out.num_turns == 4
    assert all(c["params"]["max_tokens"] <= 8192 and c["params"]["logprobs"] for c in server.calls)

    # the session is kernelsmith's own record, ended by finish, in a workdir under workdir_root
    (record,) = list(session_paths(Path(outcome["workdir"])))
    events = list(read_events(record))
    assert events[0]["config"]["backend"] == "verl" and events[-1]["reason"] == "finish"
    assert Path(outcome["workdir"]).is_relative_to(Path(yaml.safe_load(
        (loop_plan.out / config.AGENT_LOOP_FILE).read_text())[0]["workdir_root"]))


def test_a_small_context_gets_the_guide_without_its_playbook(loop_plan, model):
    """verl's prompt plus response is the policy's window: one too small for the whole guide (SmolLM2's 8,192
    positions against the CUDA guide's 9,000 tokens) gets the playbook as a pointer to SKILL.md, as the hf
    backend gives a small checkpoint, instead of a prompt that crowds out the session."""
    tokenizer = __import__("transformers").AutoTokenizer.from_pretrained(str(model))
    server = FakeServer(tokenizer, SCRIPT)
    out = play(loop_plan, tokenizer, server, {"actor_rollout_ref.rollout.prompt_length": 4096,
                                              "actor_rollout_ref.rollout.response_length": 1024})
    assert not out.extra_fields["kernelsmith"]["error"], out.extra_fields["kernelsmith"]
    first = tokenizer.decode(server.calls[0]["prompt_ids"])
    assert "Optimisation playbook" not in first and "is in SKILL.md in the workdir: read_file it" in first
    assert len(server.calls[0]["prompt_ids"]) < 4096


def test_a_crashed_rollout_is_a_failed_sample_with_reward_0(loop_plan, model):
    tokenizer = __import__("transformers").AutoTokenizer.from_pretrained(str(model))
    out = play(loop_plan, tokenizer, BrokenServer(tokenizer, ["Let me look." + call("list_files", path=".")]))
    outcome = out.extra_fields["kernelsmith"]
    assert "ConnectionError: the rollout server went away" in outcome["error"]
    assert out.reward_score == 0.0 and out.extra_fields["reward_extra_info"]["failed"] == 1.0
    assert set(out.response_mask) == {0} and out.response_ids and out.prompt_ids  # no gradient from a broken sample
    events = [json.loads(line) for line in (Path(outcome["workdir"]) / ".kernelsmith" / "sessions"
                                            / outcome["session_id"] / "events.jsonl").read_text().splitlines()]
    assert events[-1]["kind"] == "session_end" and events[-1]["reason"] == "error"  # closed, lock released

    # a prompt verl would cut from the left (losing the system prompt) fails the sample instead, before any turn
    server = FakeServer(tokenizer, [])
    short = play(loop_plan, tokenizer, server, {"actor_rollout_ref.rollout.prompt_length": 256})
    assert "fills rollout.prompt_length (256 tokens)" in short.extra_fields["kernelsmith"]["error"]
    assert short.reward_score == 0.0 and not server.calls and set(short.response_mask) == {0}

    # a row whose task source was tampered with never starts a session: failed too, never raised
    from kernelsmith.train.verl.agent_loop import LoopOptions, lay_out

    with pytest.raises(ValueError, match="does not match its sha256"):
        lay_out({"task_source": "x = 1\n", "task_name": "t", "task_sha256": "0" * 64}, LoopOptions(device="cpu"))
