"""`kernelsmith train verl`: the data, verl's configuration, the agent-loop configuration and a launch script
for a Ray cluster (docs/train-verl.md), and the configuration's validation against verl's own schema.

OUT/verl.yaml is a Hydra primary config over verl's shipped `ppo_trainer` (found on the search path
`pkg://verl.trainer.config`), so `python -m verl.trainer.main_ppo --config-path OUT --config-name verl`
composes it exactly as `validate` does here. The algorithm is issue 19's: PPO with GAE (gamma 1, lambda
0.95), the asymmetric clip (0.2 low, 0.28 high), token-mean loss, the low-variance KL loss to the
reference; the rollouts are KernelAgentLoop's multi-turn sessions, scored by the ledger's reward."""

from __future__ import annotations

import contextlib
import io
import math
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kernelsmith.errors import BadInput
from kernelsmith.train.verl import AGENT_NAME

CONFIG_NAME = "verl"  # OUT/verl.yaml
AGENT_LOOP_FILE = "agent_loop.yaml"
LAUNCH_FILE = "launch.sh"
VERL_CONFIG_MODULE = "verl.trainer.config"
REWARD_MODULE = "pkg://kernelsmith.train.verl.reward"
LOOP_TARGET = "kernelsmith.train.verl.agent_loop.KernelAgentLoop"
# the sections verl builds dataclasses from (hydra _target_), each built here as verl's workers build it (not
# `reward`: verl 0.9.1's RewardManagerConfig cannot be built whole, its __post_init__ calls a missing super one)
DATACLASS_SECTIONS = ("algorithm", "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "critic")


@dataclass
class VerlPlan:
    tasks: list[Path]
    model: str  # the policy's checkpoint: a local folder, or a path on the cluster's nodes (remote_model)
    out: Path
    val_tasks: list[Path] | None = None
    critic: str | None = None  # an HF checkpoint for verl's critic; None: verl starts it from the policy
    remote_model: bool = False
    nodes: int = 1
    gpus_per_node: int = 8
    steps: int = 100
    max_turns: int = 150
    samples: int = 4  # rollouts per task (rollout.n)
    batch_size: int = 8  # tasks per step (data.train_batch_size)
    prompt_length: int = 16384
    response_length: int = 32768
    max_tokens_per_turn: int = 8192
    temperature: float = 1.0
    lr: float = 1e-6
    critic_lr: float = 1e-5
    kl_coef: float = 1e-3
    engine: str = "vllm"
    tensor_parallel: int = 1
    device: str = "cuda"
    sandbox: str = "ray"
    sandbox_gpus: int | None = None  # GPUs of the sandbox pool, beside verl's; None: one more node's worth
    agent_workers: int | None = None  # verl's agent-loop workers; None: min(8, the sandbox's GPUs)
    build_workers: int = 4  # build actors per agent-loop worker
    workdir_root: str = "/tmp/kernelsmith-verl"

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def pool_gpus(self) -> int:
        return self.sandbox_gpus if self.sandbox_gpus is not None else self.gpus_per_node

    @property
    def workers(self) -> int:
        return self.agent_workers or max(1, min(8, self.pool_gpus))


def check_plan(plan: VerlPlan, tasks: int) -> None:
    """Refuse what verl would refuse later, on the cluster (one line each)."""
    if plan.nodes < 1 or plan.gpus_per_node < 1 or plan.steps < 1 or plan.max_turns < 1 or plan.samples < 1:
        raise BadInput("--nodes, --gpus-per-node, --steps, --max-turns and --samples must be at least 1")
    if plan.batch_size < 1 or plan.batch_size > tasks:
        raise BadInput(f"--batch-size {plan.batch_size} must be between 1 and the number of tasks ({tasks})")
    if plan.batch_size * plan.samples % plan.gpus:
        raise BadInput(f"--batch-size x --samples ({plan.batch_size * plan.samples}) must be a multiple of the "
                       f"trainer's GPUs ({plan.gpus}): verl splits each step's rollouts evenly over them")
    if plan.gpus_per_node % plan.tensor_parallel:
        raise BadInput(f"--tensor-parallel {plan.tensor_parallel} must divide --gpus-per-node {plan.gpus_per_node}")
    if plan.sandbox not in ("ray", "local"):
        raise BadInput(f"unknown --sandbox {plan.sandbox!r}", "ray (the cluster's pool) or local (this node)")
    if plan.sandbox == "ray" and plan.pool_gpus % plan.workers:
        raise BadInput(f"--sandbox-gpus {plan.pool_gpus} must be a multiple of --agent-workers {plan.workers}: "
                       "each agent-loop worker starts its share of the pool's evaluation actors")


# -- what is written ------------------------------------------------------------------------------

def agent_loop_entries(plan: VerlPlan) -> list[dict[str, Any]]:
    """OUT/agent_loop.yaml: verl's agent-loop registry entry for KernelAgentLoop, with its options."""
    per_worker = plan.pool_gpus // plan.workers if plan.sandbox == "ray" else None
    return [{"name": AGENT_NAME, "_target_": LOOP_TARGET, "workdir_root": plan.workdir_root, "device": plan.device,
             "max_turns": plan.max_turns, "max_tokens_per_turn": plan.max_tokens_per_turn, "sandbox": plan.sandbox,
             "sandbox_gpus": per_worker, "build_workers": plan.build_workers if plan.sandbox == "ray" else None}]


def verl_config(plan: VerlPlan, data: dict[str, Path], n_tasks: int) -> dict[str, Any]:
    """OUT/verl.yaml: the overrides of verl's ppo_trainer defaults (every key must exist there)."""
    tokens = plan.prompt_length + plan.response_length
    return {
        "hydra": {"searchpath": [f"pkg://{VERL_CONFIG_MODULE}"]},
        "defaults": ["ppo_trainer", "_self_"],
        "data": {"train_files": str(data["train"]), "val_files": str(data["val"]), "prompt_key": "prompt",
                 "max_prompt_length": plan.prompt_length, "max_response_length": plan.response_length,
                 "train_batch_size": plan.batch_size, "return_raw_chat": True,
                 "filter_overlong_prompts": False, "truncation": "error", "shuffle": True, "seed": 0},
        "algorithm": {"adv_estimator": "gae", "gamma": 1.0, "lam": 0.95, "use_kl_in_reward": False},
        "actor_rollout_ref": {
            "model": {"path": plan.model, "use_remove_padding": True, "enable_gradient_checkpointing": True},
            "actor": {"ppo_mini_batch_size": plan.batch_size, "use_dynamic_bsz": True,
                      "ppo_max_token_len_per_gpu": tokens, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28,
                      "loss_agg_mode": "token-mean", "use_kl_loss": True, "kl_loss_coef": plan.kl_coef,
                      "kl_loss_type": "low_var_kl", "entropy_coeff": 0, "ppo_epochs": 1, "optim": {"lr": plan.lr}},
            "ref": {"log_prob_use_dynamic_bsz": True, "log_prob_max_token_len_per_gpu": tokens},
            "rollout": {"name": plan.engine, "mode": "async", "n": plan.samples, "temperature": plan.temperature,
                        "tensor_model_parallel_size": plan.tensor_parallel, "log_prob_use_dynamic_bsz": True,
                        "log_prob_max_token_len_per_gpu": tokens, "max_model_len": tokens,
                        "multi_turn": {"enable": True, "max_assistant_turns": plan.max_turns},
                        "agent": {"num_workers": plan.workers, "default_agent_loop": AGENT_NAME,
                                  "agent_loop_config_path": str(plan.out / AGENT_LOOP_FILE)}}},
        "critic": {"model": {"path": plan.critic or plan.model}, "use_dynamic_bsz": True,
                   "ppo_max_token_len_per_gpu": tokens, "cliprange_value": 0.2, "optim": {"lr": plan.critic_lr}},
        "reward": {"custom_reward_function": {"path": REWARD_MODULE, "name": "compute_score"}},
        "trainer": {"nnodes": plan.nodes, "n_gpus_per_node": plan.gpus_per_node,
                    "total_training_steps": plan.steps,
                    "total_epochs": max(1, math.ceil(plan.steps * plan.batch_size / n_tasks)),
                    "project_name": "kernelsmith", "experiment_name": plan.out.name, "logger": ["console"],
                    "default_local_dir": str(plan.out / "checkpoints"), "val_before_train": False,
                    "test_freq": -1, "save_freq": 10},
    }


def launch_command(plan: VerlPlan) -> str:
    """The job: verl's own entry point with this configuration, submitted to the running Ray cluster."""
    trainer = f"python3 -m verl.trainer.main_ppo --config-path {shlex.quote(str(plan.out))} --config-name {CONFIG_NAME}"
    return f'ray job submit --address "${{RAY_ADDRESS:-http://127.0.0.1:8265}}" -- {trainer}'


def launch_script(plan: VerlPlan) -> str:
    return ("#!/usr/bin/env bash\n"
            "# Written by `kernelsmith train verl`. Run it on the Ray cluster's head node once every node has\n"
            "# joined (docs/train-verl.md); arguments after it are Hydra overrides, e.g. trainer.save_freq=5.\n"
            "set -euo pipefail\n" + launch_command(plan) + ' "$@"\n')


def write(plan: VerlPlan) -> dict[str, Path]:
    """The data files, OUT/verl.yaml, OUT/agent_loop.yaml and OUT/launch.sh; their paths."""
    from kernelsmith.train.verl import data

    train = data.task_rows(plan.tasks, "train")
    val = data.task_rows(plan.val_tasks, "val") if plan.val_tasks else train
    files = {"train": data.write_parquet(train, plan.out / "data" / "train.parquet"),
             "val": data.write_parquet(val, plan.out / "data" / "val.parquet")}
    files["agent_loop"] = _write_yaml(agent_loop_entries(plan), plan.out / AGENT_LOOP_FILE)
    files["config"] = _write_yaml(verl_config(plan, files, len(train)), plan.out / f"{CONFIG_NAME}.yaml")
    files["launch"] = plan.out / LAUNCH_FILE
    files["launch"].write_text(launch_script(plan))
    files["launch"].chmod(0o755)
    return files


def _write_yaml(value: Any, path: Path) -> Path:
    try:
        import yaml
    except ImportError:
        raise BadInput("writing verl's configuration needs PyYAML", "pip install 'kernelsmith[scale]'") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(value, sort_keys=False, default_flow_style=False))
    return path


# -- validation against verl's schema -------------------------------------------------------------

def compose(folder: Path, name: str = CONFIG_NAME):
    """folder/name.yaml composed by Hydra as verl's main_ppo composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(folder).resolve()), version_base=None):
        return hydra_compose(config_name=name)


def verl_defaults():
    """verl's shipped ppo_trainer.yaml, composed: the schema every key of ours must exist in."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module=VERL_CONFIG_MODULE, version_base=None):
        return hydra_compose(config_name="ppo_trainer")


def check_known_keys(path: Path) -> None:
    """Every key of the config file must be one of verl's: merged into its defaults in struct mode, an unknown
    key raises (Hydra alone would add it silently, and verl would never read it)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError

    ours = OmegaConf.load(path)
    for key in ("hydra", "defaults"):
        ours.pop(key, None)
    schema = verl_defaults()
    OmegaConf.set_struct(schema, True)
    try:
        OmegaConf.merge(schema, ours)
    except ConfigKeyError as err:
        raise BadInput(f"{path}: unknown key {err.full_key or _first_line(err)}",
                       "every key must be one of verl's ppo_trainer.yaml") from None


def build_dataclasses(config, local_model: bool) -> list[str]:
    """verl's dataclass configs of the sections its workers build; the names of the dataclasses built. With a
    local model, its HFModelConfig too: verl's own loading of the checkpoint's config and tokenizer."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    sections = DATACLASS_SECTIONS + (("actor_rollout_ref.model",) if local_model else ())
    return [type(omega_conf_to_dataclass(OmegaConf.select(config, section))).__name__ for section in sections]


def without_critic_model(config):
    """A copy without critic.model: building the critic's dataclass loads its model (HFModelConfig), which a path
    that exists only on the cluster's nodes cannot give here."""
    import copy

    from omegaconf import open_dict

    stripped = copy.deepcopy(config)
    with open_dict(stripped):
        stripped.critic.pop("model")
    return stripped


def validate(folder: Path, local_model: bool = True) -> list[str]:
    """Compose folder's verl.yaml with verl's defaults and check it as main_ppo does, plus the unknown keys and
    the dataclasses. One line (BadInput) for what fails; the dataclasses built when all is well."""
    _need_verl()
    path = Path(folder) / f"{CONFIG_NAME}.yaml"
    check_known_keys(path)
    try:
        config = compose(folder)
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config

        checked = config if local_model else without_critic_model(config)
        with contextlib.redirect_stdout(io.StringIO()):  # verl prints its own "all checks passed"
            validate_config(checked, use_reference_policy=need_reference_policy(checked),
                            use_critic=need_critic(checked))
        built = build_dataclasses(checked, local_model)
        _check_agent_loop(config)
    except BadInput:
        raise
    except Exception as err:  # Hydra's, OmegaConf's and verl's own checks raise whatever they raise
        raise BadInput(f"{path} is not a valid verl configuration: {type(err).__name__}: {_first_line(err)}") from None
    return built


def _check_agent_loop(config) -> None:
    """The agent-loop file verl will load names our loop, and its options are the loop's."""
    from omegaconf import OmegaConf

    entries = OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    ours = [e for e in entries if e.name == config.actor_rollout_ref.rollout.agent.default_agent_loop]
    if len(ours) != 1 or ours[0]["_target_"] != LOOP_TARGET:
        raise BadInput("the agent-loop configuration does not register kernelsmith's loop as the default one")
    from kernelsmith.train.verl.agent_loop import LoopOptions

    unknown = set(ours[0]) - {"name", "_target_"} - set(LoopOptions.__dataclass_fields__)
    if unknown:
        raise BadInput(f"the agent-loop configuration has unknown options: {', '.join(sorted(unknown))}")


def _need_verl() -> None:
    try:
        import hydra  # noqa: F401
        import verl  # noqa: F401
    except ImportError as err:
        raise BadInput(f"validating the configuration needs verl ({err.name} is missing)",
                       "pip install 'kernelsmith[scale]', or pass --no-validate") from None


def _first_line(err: Exception) -> str:
    return " ".join(str(err).split("\n")[0].split())[:300]


# -- the command ----------------------------------------------------------------------------------

def checkpoint(path: str | None, flag: str, remote: bool) -> str | None:
    """A local checkpoint folder as an absolute path; with remote, the path as given (it exists only on the
    cluster's nodes)."""
    if path is None or remote:
        return path
    if not (Path(path).expanduser() / "config.json").is_file():
        raise BadInput(f"no model checkpoint in {path} ({flag})",
                       "give a local folder with config.json and a tokenizer, or pass --remote-model for a path "
                       "that exists only on the cluster's nodes")
    return str(Path(path).expanduser().resolve())


def run(plan: VerlPlan, check: bool = True) -> dict[str, Any]:
    """Write everything for the cluster, validate it against verl unless told not to; what a report shows."""
    plan = replace(plan, model=checkpoint(plan.model, "--model", plan.remote_model),
                   critic=checkpoint(plan.critic, "--critic", plan.remote_model))
    check_plan(plan, len(plan.tasks))
    if check:
        _need_verl()  # before anything is written
    files = write(plan)
    built = validate(plan.out, local_model=not plan.remote_model) if check else []
    return {"files": files, "validated": built, "launch": launch_command(plan)}
