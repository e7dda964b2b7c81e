"""kernelsmith's pieces for verl (`kernelsmith train verl`, docs/train-verl.md): PPO at cluster scale on KernelEnv.

- `agent_loop`: `KernelAgentLoop`, verl's `AgentLoopBase` driving one KernelEnv session per sample (imports verl);
- `reward`: verl's custom reward function form, returning the reward the agent loop took from the ledger;
- `data`: a tasks folder as the parquet rows verl's RLHFDataset reads;
- `config`: the verl configuration, the agent-loop configuration and the launch script, validated against
  verl's own schema.

Importing this package imports neither verl nor Ray: `data` and `config` work without them (validation aside).
"""

AGENT_NAME = "kernelsmith"  # the agent_name of every row, and the name the agent loop is registered under
DATA_SOURCE = "kernelsmith"
